#!/usr/bin/env python3
"""PyTorch's training step for the training benchmark's peer (GPU machine).

The configuration GPU.md's baseline names: transformers' model from a config.json with
random weights, F32 master weights, BF16 autocast, SDPA attention, fused AdamW, next-token
loss on random tokens, B×T tokens per step. Prints one JSON object: per-step seconds after
--warmup steps, peak memory and versions.

  torch_train_step.py --config tests/fixtures/configs/qwen2.5-0.5b/config.json --batch 8 --seq 1024 \
      --steps 12 --warmup 2 [--compile]
"""

import argparse
import json
import time

import torch
import transformers


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", required=True)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--lr", type=float, default=1e-4)
    p.add_argument("--compile", action="store_true")
    args = p.parse_args()
    torch.manual_seed(0)
    config = transformers.AutoConfig.from_pretrained(args.config)
    config._attn_implementation = "sdpa"
    model = transformers.AutoModelForCausalLM.from_config(config).to("cuda", torch.float32)
    model.train()
    step_fn = model
    if args.compile:
        step_fn = torch.compile(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.1, fused=True)
    gen = torch.Generator(device="cuda").manual_seed(0)
    seconds = []
    torch.cuda.reset_peak_memory_stats()
    for step in range(args.warmup + args.steps):
        ids = torch.randint(0, config.vocab_size, (args.batch, args.seq + 1), device="cuda", generator=gen)
        torch.cuda.synchronize()
        start = time.perf_counter()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = step_fn(input_ids=ids[:, :-1]).logits
        loss = torch.nn.functional.cross_entropy(logits.float().reshape(-1, logits.size(-1)), ids[:, 1:].reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        if step >= args.warmup:
            seconds.append(time.perf_counter() - start)
    print(json.dumps({"seconds": seconds, "peak_bytes": torch.cuda.max_memory_allocated(),
                      "torch": torch.__version__, "transformers": transformers.__version__,
                      "compile": args.compile, "loss": float(loss)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
