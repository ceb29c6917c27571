#!/usr/bin/env python3
"""The PyTorch peers of the decode benchmark (GPU machine): random BF16 weights from a
config.json, random prompt ids of length C per sequence, greedy, never stopping early.

  hf_generate      transformers' `generate` (eager, SDPA attention, DynamicCache), greedy,
                   min_new_tokens = max_new_tokens
  static_compiled  bench/generate/static_cache_model.py: a preallocated (L, B, Hkv, S, D)
                   cache, fused q/k/v and gate/up GEMMs, SDPA prefill (flash, GQA), grouped-
                   matmul decode attention; prefill eager, the decode step under
                   torch.compile(mode="reduce-overhead") (CUDA graphs), warmed up before timing

Both peers use the same weights (the static model takes transformers' tensors) and the same
prompts. Per case and repetition (after --warmup untimed runs):
  ttft_ms              start of the call → first generated token on the host (synchronized)
  prefill_ms           the prompt's forward pass alone, CUDA events (static: the eager prefill
                       with the first argmax; HF: its base model with a fresh cache + the LM
                       head on the last position)
  decode_tokens_per_s  B · (N − 1) / (time from the first token to the last): generated tokens
                       after the first, per second of decode
Peak memory: torch.cuda.max_memory_allocated over the case (weights included). Printed: one
JSON document (also written to --out).

  torch_generate.py --config tests/fixtures/configs/qwen2.5-0.5b/config.json --batch 1,8,32,64 \\
      --context 8,512,2048 --new-tokens 128 --warmup 1 --reps 5 [--peers hf,static] --out peer.json
  torch_generate.py --self-check   # CPU, no transformers: the static model against torch_reference
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
import traceback
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parents[1] / "tools" / "alignment"))
import static_cache_model as scm  # noqa: E402
import torch_reference  # noqa: E402

PEERS = {"hf": "hf_generate", "static": "static_compiled"}


def prompts_for(vocab: int, batch: int, context: int, seed: int, device: str) -> torch.Tensor:
    """(B, C) random prompt ids, the same for every peer of a case."""
    gen = torch.Generator(device="cpu").manual_seed(seed * 1_000_003 + batch * 10_007 + context)
    return torch.randint(0, vocab, (batch, context), generator=gen).to(device)


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


# ---- static cache + torch.compile -------------------------------------------------------


def static_generate(model, step, prompt: torch.Tensor, new_tokens: int, device: str) -> dict:
    """Greedy: eager prefill, then new_tokens − 1 steps of `step`. Times in seconds."""
    B, C = prompt.shape
    sync(device)
    t0 = time.perf_counter()
    first = model(prompt, torch.arange(C, device=prompt.device), prefill=True).argmax(-1, keepdim=True)  # (B, 1)
    first_host = first.cpu()  # the first token on the host: TTFT
    t1 = time.perf_counter()
    tokens = [first]
    token, position = first, torch.tensor([C], device=prompt.device)  # (B, 1), (1)
    mark = getattr(getattr(torch, "compiler", None), "cudagraph_mark_step_begin", None)
    for _ in range(new_tokens - 1):
        if mark is not None:
            mark()  # the previous step's outputs are dead: the graph may reuse them
        token = step(model, token, position).clone()  # (B, 1), out of the graph's pool
        tokens.append(token)
        position += 1
    ids = torch.cat(tokens, dim=1)  # (B, N)
    sync(device)
    t2 = time.perf_counter()
    return {"ids": ids, "ttft_s": t1 - t0, "decode_s": t2 - t1, "first": first_host}


def cudagraph_skips() -> int | None:
    """How often inductor has declined CUDA graphs in this process (None: not reported)."""
    try:
        from torch._dynamo.utils import counters
        return int(counters["inductor"]["cudagraph_skips"])
    except (ImportError, AttributeError, KeyError):
        return None


def timed_prefill(model, prompt: torch.Tensor, device: str) -> float:
    """Milliseconds of the static model's prefill (+ argmax), CUDA events where on CUDA."""
    positions = torch.arange(prompt.shape[1], device=prompt.device)
    if not device.startswith("cuda"):
        start = time.perf_counter()
        model(prompt, positions, prefill=True).argmax(-1)
        return 1e3 * (time.perf_counter() - start)
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    begin.record()
    model(prompt, positions, prefill=True).argmax(-1)
    end.record()
    end.synchronize()
    return begin.elapsed_time(end)


def run_static(cfg: dict, fused: dict, batch: int, context: int, args, device: str) -> dict:
    N = args.new_tokens
    model = scm.StaticCacheModel(cfg, fused, batch, context + N, args.attention).eval()
    step = scm.decode_step
    compile_s = None
    if not args.no_compile:
        # The cache is written inside the graph: a static address lets CUDA graphs keep it.
        torch._dynamo.mark_static_address(model.k_cache)
        torch._dynamo.mark_static_address(model.v_cache)
        step = torch.compile(scm.decode_step, mode="reduce-overhead", fullgraph=True, dynamic=False)
    skips_before = cudagraph_skips()
    prompt = prompts_for(cfg["vocab_size"], batch, context, args.seed, device)
    samples = {"decode_tokens_per_s": [], "prefill_ms": [], "ttft_ms": []}
    with torch.no_grad():
        start = time.perf_counter()
        for _ in range(max(1, args.warmup)):  # compiles, records the graph, replays it
            static_generate(model, step, prompt, N, device)
        compile_s = time.perf_counter() - start
        skipped = None if skips_before is None else cudagraph_skips() - skips_before
        if skipped:
            print(f"torch_generate: warning: torch.compile skipped CUDA graphs {skipped} times "
                  "(the decode step runs without them)", file=sys.stderr)
        for _ in range(args.reps):
            run = static_generate(model, step, prompt, N, device)
            samples["ttft_ms"].append(1e3 * run["ttft_s"])
            samples["decode_tokens_per_s"].append(batch * (N - 1) / run["decode_s"])
            samples["prefill_ms"].append(timed_prefill(model, prompt, device))
        # The compiled graph must give the eager model's tokens (same kernels up to fusion).
        eager = static_generate(model, scm.decode_step, prompt, min(N, 16), device)
    return {"samples": samples, "kv_bytes": model.kv_bytes(), "warmup_s": compile_s, "cudagraph_skips": skipped,
            "ids": run["ids"].cpu(),
            "eager_prefix_agreement": prefix_agreement(eager["ids"].cpu(), run["ids"][:, :eager["ids"].shape[1]].cpu())}


# ---- transformers generate --------------------------------------------------------------


def build_hf(config_path: str, device: str, seed: int):
    import transformers
    config = transformers.AutoConfig.from_pretrained(config_path)
    config._attn_implementation = "sdpa"
    torch.manual_seed(seed)
    with torch.device(device):  # initialize on the GPU: the host would take minutes for 1.5B
        model = transformers.AutoModelForCausalLM.from_config(config)
    return model.to(torch.bfloat16).eval()


def run_hf(model, batch: int, context: int, args, device: str) -> dict:
    from transformers import StoppingCriteria, StoppingCriteriaList
    N = args.new_tokens
    vocab = model.config.vocab_size
    prompt = prompts_for(vocab, batch, context, args.seed, device)
    eos = model.config.eos_token_id
    eos = eos[0] if isinstance(eos, list) else eos

    class FirstToken(StoppingCriteria):
        """Notes when the first generated token exists (called after every step)."""

        def __init__(self):
            self.first = None

        def __call__(self, input_ids, scores, **kwargs):
            if self.first is None:
                sync(device)
                self.first = time.perf_counter()
            return torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)

    def one():
        timer = FirstToken()
        sync(device)
        t0 = time.perf_counter()
        out = model.generate(input_ids=prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=N,
                             min_new_tokens=N, do_sample=False, use_cache=True, eos_token_id=eos,
                             pad_token_id=eos if eos is not None else 0,
                             stopping_criteria=StoppingCriteriaList([timer]))
        sync(device)
        t2 = time.perf_counter()
        if out.shape != (batch, context + N):
            raise RuntimeError(f"generate returned {tuple(out.shape)}, expected {(batch, context + N)}")
        return out[:, context:], t0, timer.first, t2

    def prefill_ms() -> float:
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()
        hidden = model.model(input_ids=prompt, use_cache=True).last_hidden_state  # (B, C, hidden)
        model.lm_head(hidden[:, -1:]).argmax(-1)
        end.record()
        end.synchronize()
        return begin.elapsed_time(end)

    samples = {"decode_tokens_per_s": [], "prefill_ms": [], "ttft_ms": []}
    with torch.no_grad():
        for _ in range(args.warmup):
            one()
        for _ in range(args.hf_reps or args.reps):
            ids, t0, t1, t2 = one()
            samples["ttft_ms"].append(1e3 * (t1 - t0))
            samples["decode_tokens_per_s"].append(batch * (N - 1) / (t2 - t1))
            samples["prefill_ms"].append(prefill_ms())
    return {"samples": samples, "ids": ids.cpu()}


def prefix_agreement(a: torch.Tensor, b: torch.Tensor) -> float:
    """Mean over rows of the equal leading tokens as a fraction of the row length."""
    n = min(a.shape[1], b.shape[1])
    same = (a[:, :n] == b[:, :n]).int().cumprod(dim=1).sum(dim=1)  # (B)
    return float(same.float().mean() / n) if n else 1.0


# ---- driver -----------------------------------------------------------------------------


def case_row(peer: str, batch: int, context: int, args) -> dict:
    return {"peer": PEERS[peer], "batch": batch, "context": context, "new_tokens": args.new_tokens,
            "samples": {"decode_tokens_per_s": [], "prefill_ms": [], "ttft_ms": []}}


def fresh_case(device: str) -> None:
    """Frees what the previous case left (compiled graphs and their pools, caches)."""
    if hasattr(torch, "_dynamo"):
        torch._dynamo.reset()
        try:  # the CUDA graphs of the last case and their private memory pools
            from torch._inductor import cudagraph_trees
            cudagraph_trees.reset_cudagraph_trees()
        except (ImportError, AttributeError):
            pass
    gc.collect()
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def run(args) -> dict:
    import transformers
    device = args.device
    if hasattr(torch, "_dynamo"):  # one compile per case shape: do not fall back to eager
        torch._dynamo.config.cache_size_limit = max(64, torch._dynamo.config.cache_size_limit)
    cfg = json.loads(Path(args.config).read_text())
    cases = [(b, c) for b in args.batch for c in args.context]
    doc = {"tool": "torch_generate", "config": args.config, "model_type": cfg.get("model_type"),
           "dtype": "bf16", "device": torch.cuda.get_device_name(0) if device.startswith("cuda") else device,
           "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                        "cuda": torch.version.cuda},
           "settings": {"new_tokens": args.new_tokens, "warmup": args.warmup, "reps": args.reps,
                        "hf_reps": args.hf_reps or args.reps, "seed": args.seed, "attention": args.attention,
                        "compile": None if args.no_compile else "reduce-overhead, fullgraph, dynamic=False",
                        "weights": "transformers from_config init (std initializer_range), BF16"},
           "cases": []}
    model = build_hf(args.config, device, args.seed)
    hf_ids = {}
    if "hf" in args.peers:
        for b, c in cases:
            row = case_row("hf", b, c, args)
            fresh_case(device)
            try:
                result = run_hf(model, b, c, args, device)
                row["samples"] = result["samples"]
                hf_ids[(b, c)] = result["ids"]
            except Exception as e:  # noqa: BLE001  (one failed case, e.g. out of memory, is reported)
                row["error"] = f"{type(e).__name__}: {e}"[:2000]
                traceback.print_exc()
            row["peak_memory_bytes"] = torch.cuda.max_memory_allocated() if device.startswith("cuda") else None
            doc["cases"].append(row)
            print(f"torch_generate: hf b{b} c{c}: {summary_line(row)}", file=sys.stderr, flush=True)
    if "static" in args.peers:
        params = {k: v.detach() for k, v in model.state_dict().items()}
        del model
        fused = scm.fuse_params(params, cfg["num_hidden_layers"])  # frees the unfused tensors
        del params
        for b, c in cases:
            row = case_row("static", b, c, args)
            fresh_case(device)
            try:
                result = run_static(cfg, fused, b, c, args, device)
                row["samples"] = result["samples"]
                row["kv_bytes"] = result["kv_bytes"]
                row["warmup_s"] = result["warmup_s"]
                row["eager_prefix_agreement"] = result["eager_prefix_agreement"]
                row["cudagraph_skips"] = result["cudagraph_skips"]
                if (b, c) in hf_ids:  # same weights and prompts: a check that both compute one model
                    row["hf_prefix_agreement"] = prefix_agreement(result["ids"], hf_ids[(b, c)])
            except Exception as e:  # noqa: BLE001
                row["error"] = f"{type(e).__name__}: {e}"[:2000]
                traceback.print_exc()
            row["peak_memory_bytes"] = torch.cuda.max_memory_allocated() if device.startswith("cuda") else None
            doc["cases"].append(row)
            print(f"torch_generate: static b{b} c{c}: {summary_line(row)}", file=sys.stderr, flush=True)
    return doc


def summary_line(row: dict) -> str:
    if "error" in row:
        return "ERROR " + row["error"][:200]
    tps = sorted(row["samples"]["decode_tokens_per_s"])
    ttft = sorted(row["samples"]["ttft_ms"])
    return (f"decode {tps[len(tps) // 2]:.0f} tokens/s, TTFT {ttft[len(ttft) // 2]:.1f} ms, "
            f"peak {(row.get('peak_memory_bytes') or 0) / 2**30:.2f} GiB")


# ---- self-check (CPU, torch only) -------------------------------------------------------


def reference_greedy(cfg: dict, params: dict, prompt: torch.Tensor, n: int) -> torch.Tensor:
    """Greedy by full recompute with tools/alignment/torch_reference.py: (B, n) ids."""
    ids = prompt
    for _ in range(n):
        logits = torch_reference.forward(cfg, params, ids, params["model.embed_tokens.weight"].dtype)
        ids = torch.cat([ids, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
    return ids[:, prompt.shape[1]:]


def self_check() -> int:
    base = {"vocab_size": 96, "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 2,
            "num_attention_heads": 4, "num_key_value_heads": 2, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
            "max_position_embeddings": 64}
    families = {"qwen2": dict(model_type="qwen2", tie_word_embeddings=True),
                "llama": dict(model_type="llama", tie_word_embeddings=False),
                "qwen3": dict(model_type="qwen3", tie_word_embeddings=True, head_dim=16)}
    attentions = ["matmul", "auto"] + (["sdpa"] if scm.sdpa_has_gqa() else [])
    for name, extra in families.items():
        cfg = dict(base, **extra)
        params = scm.random_params(cfg, torch.float32, "cpu", seed=3, std=0.2)
        fused = scm.fuse_params(dict(params), cfg["num_hidden_layers"])
        assert not set(params) - set(dict(params)) and fused["layers.1.w_qkv"].shape[0] == \
            (cfg["num_attention_heads"] + 2 * cfg["num_key_value_heads"]) * torch_reference.head_dim(cfg)
        prompt = prompts_for(cfg["vocab_size"], 3, 7, 0, "cpu")  # (3, 7)
        want = reference_greedy(cfg, params, prompt, 12)
        ref_logits = torch_reference.forward(cfg, params, prompt, torch.float32)[:, -1]  # (B, V)
        for attention in attentions:
            model = scm.StaticCacheModel(cfg, fused, 3, 7 + 12, attention)
            with torch.no_grad():
                got_logits = model(prompt, torch.arange(7), prefill=True)
                run = static_generate(model, scm.decode_step, prompt, 12, "cpu")
                # A decode step's logits against the reference's at the same position.
                step_logits = model(run["ids"][:, 4:5], torch.tensor([7 + 4]))
            full = torch_reference.forward(cfg, params, torch.cat([prompt, run["ids"][:, :5]], 1), torch.float32)
            err_prefill = float((got_logits - ref_logits).abs().max())
            err_step = float((step_logits - full[:, -1]).abs().max())
            same = torch.equal(run["ids"], want)
            print(f"  {name:<6} {attention:<6}: greedy ids equal torch_reference: {same}; max |Δ logits| "
                  f"prefill {err_prefill:.2e}, decode step {err_step:.2e}")
            assert same and err_prefill < 1e-4 and err_step < 1e-4, name
            assert model.kv_bytes() == 2 * 2 * 3 * 2 * 19 * torch_reference.head_dim(cfg) * 4
        # The timed case on the CPU, eager: every sample is there and positive.
        small = argparse.Namespace(new_tokens=6, warmup=1, reps=2, attention="auto", no_compile=True, seed=0)
        case = run_static(cfg, fused, 2, 5, small, "cpu")
        assert all(len(v) == 2 and min(v) > 0 for v in case["samples"].values()), case["samples"]
        assert case["ids"].shape == (2, 6) and case["eager_prefix_agreement"] == 1.0
    assert prefix_agreement(torch.tensor([[1, 2, 3, 4], [1, 9, 3, 4]]), torch.tensor([[1, 2, 3, 5], [1, 2, 3, 4]])) == 0.5
    print("self-check passed")
    return 0


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", help="a config.json (random weights are made from it)")
    p.add_argument("--batch", default="1,8,32,64", help="comma-separated batch sizes")
    p.add_argument("--context", default="8,512,2048", help="comma-separated prompt lengths")
    p.add_argument("--new-tokens", type=int, default=128)
    p.add_argument("--warmup", type=int, default=1, help="untimed runs per case first (static: at least 1)")
    p.add_argument("--reps", type=int, default=5, help="timed runs per case")
    p.add_argument("--hf-reps", type=int, help="timed runs of HF generate (default --reps)")
    p.add_argument("--peers", default="hf,static", help="hf, static or both")
    p.add_argument("--attention", choices=("auto", "sdpa", "matmul"), default="auto",
                   help="static model: auto = SDPA prefill, grouped-matmul decode")
    p.add_argument("--no-compile", action="store_true", help="static model eager (no CUDA graphs)")
    p.add_argument("--device", default="cuda")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", help="also write the JSON document here")
    p.add_argument("--self-check", action="store_true")
    args = p.parse_args(argv)
    args.batch = [int(v) for v in args.batch.split(",") if v]
    args.context = [int(v) for v in args.context.split(",") if v]
    args.peers = [v for v in args.peers.split(",") if v]
    if not args.self_check:
        if not args.config:
            p.error("--config is required")
        if any(v not in PEERS for v in args.peers):
            p.error(f"--peers takes {', '.join(PEERS)}")
        if args.new_tokens < 2:
            p.error("--new-tokens must be at least 2 (decode is timed from the first token)")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.self_check:
        return self_check()
    doc = run(args)
    text = json.dumps(doc, indent=2)
    if args.out:
        Path(args.out).write_text(text + "\n", encoding="utf-8")
    print(text)
    return 1 if any("error" in c for c in doc["cases"]) else 0


if __name__ == "__main__":
    sys.exit(main())
