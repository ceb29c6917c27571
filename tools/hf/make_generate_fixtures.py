#!/usr/bin/env python3
"""Tiny Hugging Face models and the greedy outputs of transformers' `generate` for them: the
fixtures of `microllm generate` (tests/fixtures/models/, checked by tools/hf/compare_generate.py).

Runs on the GPU machine (torch + transformers + tokenizers, CUDA). For each family
  qwen2   q/k/v biases, tied embeddings
  llama   untied LM head
  qwen3   QK-norm, an explicit head_dim (2 × hidden / heads, so ≠ hidden / heads), tied
it writes two folders under OUT/fixtures/:
  <family>-random   `from_config` with a fixed seed, initializer_range 0.1, RMSNorm weights
                    1 + 0.1·N(0,1) and q/k/v biases 0.1·N(0,1) (so no parameter is trivial);
                    random prompt ids; no tokenizer
  <family>-trained  trained briefly with transformers on real text (--corpus, cut at blank
                    lines into documents, each followed by <|endoftext|>, tokenized with
                    --tokenizer), AdamW on the GPU in F32, until the loss is clearly down; the
                    prompts are the opening tokens of corpus documents; the tokenizer.json,
                    a tokenizer_config.json and EOS = the tokenizer's <|endoftext|> go with it
Each folder holds config.json, model.safetensors (F32, `save_pretrained`),
generation_config.json (do_sample false, eos), and expected.json:

  {schema: "microllm-generate-fixture-v1", name, family, kind, versions, device,
   attn_implementation, max_new_tokens, eos_token_id, model: {config, parameters, files},
   training (trained only): {steps, batch, seq, lr, initial_loss, final_loss, eval_loss, ...},
   checks: {reference_max_abs_logits, reference_top1, nocache_top1, min_margin, ...},
   prompts: [{source, prompt_ids, prompt_text?, hf_ids, hf_text?, hf_finish, hf_margins,
              hf_logits_last?, hf_bf16_ids, hf_bf16_margins}]}

hf_ids are the generated tokens only (an EOS that ended the generation included), from
`model.generate(ids, max_new_tokens=N, do_sample=False)` in F32 on CUDA, one prompt at a time
(no padding); hf_margins the top-1 − top-2 logit gap at each generated step; hf_logits_last
the F32 logits of the first generated step (6 significant digits); hf_bf16_ids the same
greedy run after `model.to(torch.bfloat16)`. The expected outputs come from the model
reloaded from the saved folder. A prompt is kept only when every F32 step's margin is at
least --min-margin (near-ties would make an exact comparison a coin toss); several
candidates are tried per length. Checks before writing: the parameter count equals the one
derived from the config, the reloaded weights equal the trained ones, HF's cached greedy
path equals its no-cache argmax, and tools/alignment/torch_reference.py (an independent
implementation) gives the same logits (F32, ≤ 1e-3) and top-1 along the path.

  python3 tools/hf/make_generate_fixtures.py --corpus corpus.txt --tokenizer tok/tokenizer.json \\
      --out $OUT [--families qwen2,llama,qwen3] [--kinds random,trained] [--steps 400]
  python3 tools/hf/make_generate_fixtures.py --self-check     # what needs no transformers
                                                              # (generate_fixtures_self_check.py)

Then, here: copy OUT/fixtures/* to tests/fixtures/models/.
"""

from __future__ import annotations

import argparse
import copy
import datetime as dt
import hashlib
import json
import math
import re
import shutil
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import torch

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tools" / "alignment"))
sys.path.insert(0, str(REPO / "tools" / "hf"))
import torch_reference  # noqa: E402  (the explicit PyTorch model: an independent check)

SCHEMA = "microllm-generate-fixture-v1"
EOS_TEXT = "<|endoftext|>"
FAMILIES = ("qwen2", "llama", "qwen3")
KINDS = ("random", "trained")


# ---- configurations ---------------------------------------------------------------------


def model_config(family: str, vocab: int, hidden: int, args, eos: int | None,
                 init_range: float) -> dict[str, Any]:
    """The config.json values of one tiny model (transformers 4 names; 5 accepts them)."""
    cfg: dict[str, Any] = {
        "model_type": family, "vocab_size": vocab, "hidden_size": hidden,
        "intermediate_size": args.intermediate, "num_hidden_layers": args.layers,
        "num_attention_heads": args.heads, "num_key_value_heads": args.kv_heads,
        "max_position_embeddings": args.max_positions, "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0, "hidden_act": "silu", "initializer_range": init_range,
        "tie_word_embeddings": family != "llama", "use_cache": True,
    }
    if eos is not None:
        cfg.update(bos_token_id=eos, eos_token_id=eos)
    if family == "qwen2":
        cfg.update(use_sliding_window=False)
    elif family == "llama":
        cfg.update(attention_bias=False, mlp_bias=False)
    else:
        cfg.update(head_dim=2 * hidden // args.heads, attention_bias=False)
    return cfg


def parameter_count(cfg: dict[str, Any]) -> int:
    """Parameters implied by the config (checked against the model transformers builds)."""
    C, V, F, L = cfg["hidden_size"], cfg["vocab_size"], cfg["intermediate_size"], cfg["num_hidden_layers"]
    H, Hkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    D = cfg.get("head_dim") or C // H
    attn = C * H * D + 2 * C * Hkv * D + H * D * C
    if cfg["model_type"] == "qwen2":
        attn += H * D + 2 * Hkv * D  # q/k/v biases
    if cfg["model_type"] == "qwen3":
        attn += 2 * D  # q_norm, k_norm
    layer = attn + 3 * C * F + 2 * C
    head = 0 if cfg["tie_word_embeddings"] else V * C
    return V * C + L * layer + C + head


# ---- corpus -----------------------------------------------------------------------------


def read_documents(path: Path) -> list[str]:
    """The corpus cut at blank lines; each piece is one training document. A literal
    <|endoftext|> in the text is dropped: EOS marks the ends of documents only."""
    text = path.read_bytes().decode("utf-8", "replace").replace(EOS_TEXT, "")
    return [d.strip() for d in re.split(r"\n\s*\n", text) if d.strip()]


def token_stream(docs_ids: list[list[int]], eos: int) -> list[int]:
    """Documents one after the other, each followed by EOS."""
    stream: list[int] = []
    for ids in docs_ids:
        stream += ids + [eos]
    return stream


# ---- training ---------------------------------------------------------------------------


def lr_at(step: int, steps: int, lr: float, warmup: int) -> float:
    """Linear warm-up, then cosine decay to lr / 10."""
    if step < warmup:
        return lr * (step + 1) / warmup
    t = (step - warmup) / max(1, steps - warmup)
    return lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * t)))


def windows(stream: torch.Tensor, batch: int, seq: int, gen: torch.Generator) -> torch.Tensor:
    """(B, seq + 1) random windows of the token stream."""
    starts = torch.randint(0, stream.numel() - seq - 1, (batch,), generator=gen, device=stream.device)
    return stream[starts[:, None] + torch.arange(seq + 1, device=stream.device)]


def train(model, stream: torch.Tensor, held_out: torch.Tensor, args) -> dict[str, Any]:
    """AdamW on next-token loss (transformers shifts the labels); returns the loss history."""
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.01)
    gen = torch.Generator(device=stream.device).manual_seed(args.seed)
    model.train()
    losses = []
    start = time.perf_counter()
    for step in range(args.steps):
        for group in opt.param_groups:
            group["lr"] = lr_at(step, args.steps, args.lr, args.warmup_steps)
        x = windows(stream, args.batch, args.seq, gen)  # (B, seq + 1)
        loss = model(input_ids=x, labels=x).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(float(loss))
    seconds = time.perf_counter() - start
    model.eval()
    with torch.no_grad():
        g = torch.Generator(device=held_out.device).manual_seed(args.seed + 1)
        evals = [float(model(input_ids=x, labels=x).loss)
                 for x in (windows(held_out, args.batch, min(args.seq, held_out.numel() - 2), g) for _ in range(8))]
    tail = losses[-max(1, min(20, len(losses) // 10)):]
    return {"steps": args.steps, "batch": args.batch, "seq": args.seq, "lr": args.lr,
            "warmup_steps": args.warmup_steps, "optimizer": "AdamW(0.9, 0.95), weight decay 0.01, clip 1.0",
            "initial_loss": losses[0], "final_loss": sum(tail) / len(tail), "eval_loss": sum(evals) / len(evals),
            "loss_every_20": [round(v, 4) for v in losses[::20]], "seconds": seconds}


# ---- greedy runs and prompt choice ------------------------------------------------------


def sig(x: float, digits: int = 6) -> float:
    return float(f"{x:.{digits}g}")


def hf_greedy(model, prompt: list[int], max_new: int, eos: int | None, with_logits: bool) -> dict[str, Any]:
    """transformers' greedy generate for one prompt (batch 1, no padding)."""
    device = next(model.parameters()).device
    x = torch.tensor([prompt], dtype=torch.long, device=device)  # (1, T)
    with torch.no_grad():
        out = model.generate(input_ids=x, attention_mask=torch.ones_like(x), max_new_tokens=max_new,
                             do_sample=False, eos_token_id=eos, pad_token_id=eos if eos is not None else 0,
                             output_logits=True, return_dict_in_generate=True)
    ids = out.sequences[0, x.shape[1]:].tolist()
    steps = [step[0].float() for step in out.logits]  # each (V,)
    margins = []
    for logits in steps:
        top = torch.topk(logits, 2).values
        margins.append(float(top[0] - top[1]))
    row = {"ids": ids, "margins": margins}
    if with_logits:
        row["logits_first"] = steps[0].cpu()
    return row


def choose(candidates: Iterator[tuple[str, list[int]]], greedy: Callable, greedy_bf16: Callable,
           min_margin: float, tries: int, need_prefix: int) -> dict[str, Any] | None:
    """The first candidate whose F32 margins all reach min_margin and whose BF16 path keeps
    the F32 one for need_prefix tokens; else the best of `tries` (margin first)."""
    best, best_key = None, None
    for _, (source, prompt) in zip(range(tries), candidates):
        f32 = greedy(prompt)
        bf16 = greedy_bf16(prompt)
        agree = 0
        for a, b in zip(f32["ids"], bf16["ids"]):
            if a != b:
                break
            agree += 1
        ok_margin = min(f32["margins"]) >= min_margin
        ok_bf16 = agree >= min(need_prefix, len(f32["ids"]))
        key = (ok_margin, ok_bf16, min(f32["margins"]))
        if best_key is None or key > best_key:
            best, best_key = {"source": source, "prompt": prompt, "f32": f32, "bf16": bf16}, key
        if ok_margin and ok_bf16:
            break
    return best


def prompt_entry(choice: dict[str, Any], eos: int | None, decode: Callable | None,
                 with_logits: bool) -> dict[str, Any]:
    f32, bf16 = choice["f32"], choice["bf16"]
    entry: dict[str, Any] = {"source": choice["source"], "prompt_ids": choice["prompt"]}
    if decode:
        entry["prompt_text"] = decode(choice["prompt"])
    entry["hf_ids"] = f32["ids"]
    if decode:
        entry["hf_text"] = decode(f32["ids"])
    entry["hf_finish"] = "stop" if eos is not None and f32["ids"] and f32["ids"][-1] == eos else "length"
    entry["hf_margins"] = [sig(m, 4) for m in f32["margins"]]
    if with_logits and "logits_first" in f32:
        entry["hf_logits_last"] = [sig(v) for v in f32["logits_first"].tolist()]
    entry["hf_bf16_ids"] = bf16["ids"]
    entry["hf_bf16_margins"] = [sig(m, 4) for m in bf16["margins"]]
    return entry


def corpus_candidates(docs: list[list[int]], length: int, seed: int) -> Iterator[tuple[str, list[int]]]:
    """Opening `length` tokens of corpus documents, in a seeded order."""
    order = torch.randperm(len(docs), generator=torch.Generator().manual_seed(seed + length)).tolist()
    for i in order:
        if len(docs[i]) >= length:
            yield f"corpus document {i}, first {length} tokens", docs[i][:length]


def eos_probe_candidates(docs: list[list[int]], seed: int, longest: int) -> Iterator[tuple[str, list[int]]]:
    """Documents cut a few tokens before their end: a trained model tends to finish them and
    emit EOS, so the EOS rule is exercised. Prompts stay within `longest` tokens."""
    order = torch.randperm(len(docs), generator=torch.Generator().manual_seed(seed + 7)).tolist()
    for i in order:
        d = docs[i]
        if 8 <= len(d) <= longest:
            cut = len(d) - min(4, len(d) // 4)
            yield f"corpus document {i}, all but its last {len(d) - cut} tokens", d[:cut]


def random_candidates(vocab: int, length: int, seed: int, avoid: int | None) -> Iterator[tuple[str, list[int]]]:
    gen = torch.Generator().manual_seed(seed * 1000 + length)
    while True:
        ids = torch.randint(0, vocab, (length,), generator=gen).tolist()
        if avoid is None or avoid not in ids:
            yield f"random ids, length {length}", ids


# ---- expected.json ----------------------------------------------------------------------


def dump_expected(doc: dict[str, Any]) -> str:
    """Indented JSON with one line per prompt (lists of ids stay on one line)."""
    head = {k: v for k, v in doc.items() if k != "prompts"}
    text = json.dumps(head, indent=2, ensure_ascii=False, allow_nan=False)
    prompts = ",\n".join("    " + json.dumps(p, ensure_ascii=False, allow_nan=False) for p in doc["prompts"])
    return text[:-2] + ',\n  "prompts": [\n' + prompts + "\n  ]\n}\n"


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# ---- transformers (GPU machine) ---------------------------------------------------------


def build_model(cfg: dict[str, Any], kind: str, seed: int, device: str):
    import transformers
    torch.manual_seed(seed)
    config = transformers.AutoConfig.for_model(**cfg)
    config._attn_implementation = "sdpa"
    model = transformers.AutoModelForCausalLM.from_config(config).to(device=device, dtype=torch.float32)
    if kind == "random":  # make the norms and biases matter too (from_config sets 1 and 0)
        gen = torch.Generator().manual_seed(seed + 1)
        with torch.no_grad():
            for name, p in model.named_parameters():
                if name.endswith("norm.weight"):
                    p.copy_(1 + 0.1 * torch.randn(p.shape, generator=gen))
                elif name.endswith(".bias"):
                    p.copy_(0.1 * torch.randn(p.shape, generator=gen))
    count = sum(p.numel() for p in model.parameters())
    if count != parameter_count(cfg):
        raise SystemExit(f"make_generate_fixtures: {cfg['model_type']}: transformers built {count} parameters, "
                         f"the config implies {parameter_count(cfg)}")
    model.generation_config.do_sample = False
    model.generation_config.eos_token_id = cfg.get("eos_token_id")
    model.generation_config.bos_token_id = cfg.get("bos_token_id")
    return model


def save_folder(model, folder: Path, cfg: dict[str, Any], tokenizer_file: Path | None) -> None:
    try:
        model.save_pretrained(folder, safe_serialization=True)
    except TypeError:  # transformers releases that dropped the argument always write safetensors
        model.save_pretrained(folder)
    if not (folder / "model.safetensors").is_file():
        raise SystemExit(f"make_generate_fixtures: {folder}: save_pretrained wrote no model.safetensors")
    config = json.loads((folder / "config.json").read_text())
    for key in ("bos_token_id", "eos_token_id", "pad_token_id"):  # null ids: leave them out
        if key in config and config[key] is None:
            del config[key]
    (folder / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    gen_path = folder / "generation_config.json"
    gen = json.loads(gen_path.read_text()) if gen_path.is_file() else {}
    gen = {k: v for k, v in gen.items() if v is not None}
    gen["do_sample"] = False
    for key in ("bos_token_id", "eos_token_id"):
        if cfg.get(key) is not None:
            gen[key] = cfg[key]
    gen_path.write_text(json.dumps(gen, indent=2) + "\n")
    if tokenizer_file is not None:
        shutil.copyfile(tokenizer_file, folder / "tokenizer.json")
        tok_cfg = {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": cfg["max_position_embeddings"],
                   "clean_up_tokenization_spaces": False}
        if cfg.get("eos_token_id") is not None:
            tok_cfg.update(eos_token=EOS_TEXT, bos_token=None)
        (folder / "tokenizer_config.json").write_text(json.dumps(tok_cfg, indent=2) + "\n")


def reference_checks(model, cfg: dict[str, Any], entries: list[dict[str, Any]]) -> dict[str, Any]:
    """HF's cached greedy path against its own no-cache argmax and against torch_reference."""
    params = {k: v.float() for k, v in model.state_dict().items()}
    worst, agree_ref, agree_nocache, total = 0.0, 0, 0, 0
    with torch.no_grad():
        for e in entries:
            ids = e["prompt_ids"] + e["hf_ids"]
            x = torch.tensor([ids], device=next(model.parameters()).device)  # (1, T)
            n = len(e["prompt_ids"])
            hf = model(input_ids=x).logits[0].float()  # (T, V)
            ref = torch_reference.forward(cfg, params, x, torch.float32)[0]  # (T, V)
            worst = max(worst, float((hf - ref).abs().max()))
            gen = torch.tensor(e["hf_ids"], device=x.device)
            agree_nocache += int((hf[n - 1:-1].argmax(-1) == gen).sum())
            agree_ref += int((ref[n - 1:-1].argmax(-1) == gen).sum())
            total += len(e["hf_ids"])
    return {"reference_max_abs_logits": worst, "reference_top1": agree_ref / total,
            "nocache_top1": agree_nocache / total}


def make_fixture(family: str, kind: str, args, out: Path, corpus=None) -> dict[str, Any]:
    import transformers
    name = f"{family}-{kind}"
    folder = out / "fixtures" / name
    if folder.exists():
        if not args.overwrite:
            raise SystemExit(f"make_generate_fixtures: {folder} exists (pass --overwrite)")
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    device = args.device
    trained = kind == "trained"
    if trained:
        vocab, eos, hidden, init = corpus["vocab"], corpus["eos"], args.hidden, 0.02
    else:
        vocab, hidden, init = args.random_vocab, args.random_hidden, 0.1
        eos = vocab - 1  # an ordinary id acts as EOS; prompts avoid it
    cfg = model_config(family, vocab, hidden, args, eos, init)
    model = build_model(cfg, kind, args.seed, device)
    training = None
    if trained:
        training = train(model, corpus["train"].to(device), corpus["held_out"].to(device), args)
        limit = args.max_final_loss if args.max_final_loss is not None else 0.75 * math.log(vocab)
        print(f"make_generate_fixtures: {name}: loss {training['initial_loss']:.3f} → {training['final_loss']:.3f} "
              f"(held out {training['eval_loss']:.3f}) in {training['seconds']:.1f} s", flush=True)
        if training["final_loss"] > limit:
            raise SystemExit(f"make_generate_fixtures: {name}: final loss {training['final_loss']:.3f} is not "
                             f"below {limit:.3f}; train longer (--steps)")
    save_folder(model, folder, cfg, args.tokenizer if trained else None)

    # The expected outputs come from the saved folder, as microllm will read it.
    loaded = transformers.AutoModelForCausalLM.from_pretrained(folder, attn_implementation="sdpa")
    loaded = loaded.to(device=device, dtype=torch.float32).eval()
    saved = model.state_dict()
    for k, v in loaded.state_dict().items():
        if not torch.equal(v, saved[k].to(v.device)):
            raise SystemExit(f"make_generate_fixtures: {name}: reloaded {k} differs from the saved weights")
    bf16 = copy.deepcopy(loaded).to(torch.bfloat16)
    max_new = args.max_new_tokens
    greedy = lambda p: hf_greedy(loaded, p, max_new, eos, not args.no_logits)  # noqa: E731
    greedy_bf16 = lambda p: hf_greedy(bf16, p, max_new, eos, False)  # noqa: E731
    decode = corpus["decode"] if trained else None
    entries = []
    for length in args.prompt_lengths:
        cands = (corpus_candidates(corpus["train_docs"], length, args.seed) if trained
                 else random_candidates(vocab, length, args.seed, eos))
        choice = choose(cands, greedy, greedy_bf16, args.min_margin, args.tries, args.bf16_prefix)
        if choice is None:
            raise SystemExit(f"make_generate_fixtures: {name}: no corpus document has {length} tokens")
        entries.append(prompt_entry(choice, eos, decode, not args.no_logits))
    if trained and not any(e["hf_finish"] == "stop" for e in entries):
        longest = args.max_positions - max_new
        probes = eos_probe_candidates(corpus["train_docs"], args.seed, longest)
        for _, (source, prompt) in zip(range(args.tries * 4), probes):
            f32 = greedy(prompt)
            if f32["ids"] and f32["ids"][-1] == eos and min(f32["margins"]) >= args.min_margin:
                choice = {"source": source, "prompt": prompt, "f32": f32, "bf16": greedy_bf16(prompt)}
                entries.append(prompt_entry(choice, eos, decode, not args.no_logits))
                break
        else:
            print(f"make_generate_fixtures: {name}: warning: no prompt stops on EOS", flush=True)
    checks = reference_checks(loaded, cfg, entries)
    checks["min_margin"] = min(min(e["hf_margins"]) for e in entries)
    checks["min_margin_required"] = args.min_margin
    checks["bf16_equal_prefix_min"] = min(
        next((i for i, (a, b) in enumerate(zip(e["hf_ids"], e["hf_bf16_ids"])) if a != b),
             min(len(e["hf_ids"]), len(e["hf_bf16_ids"]))) for e in entries)
    checks["stopped_on_eos"] = sum(e["hf_finish"] == "stop" for e in entries)
    if checks["reference_max_abs_logits"] > 1e-3:
        raise SystemExit(f"make_generate_fixtures: {name}: transformers and torch_reference disagree: {checks}")
    if checks["nocache_top1"] < 1.0 or checks["reference_top1"] < 1.0:
        print(f"make_generate_fixtures: {name}: warning: a near-tie flips top-1 between HF's cached path and "
              f"a full forward: {checks}", flush=True)
    files = {p.name: p.stat().st_size for p in sorted(folder.iterdir())}
    doc = {
        "schema": SCHEMA, "name": name, "family": family, "kind": kind,
        "created_utc": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "command": list(getattr(sys, "orig_argv", sys.argv)),
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                     "tokenizers": corpus.get("tokenizers_version") if corpus else None,
                     "cuda": torch.version.cuda},
        "device": torch.cuda.get_device_name(0) if device.startswith("cuda") else device,
        "attn_implementation": "sdpa", "max_new_tokens": max_new, "do_sample": False, "eos_token_id": eos,
        "model": {"config": cfg, "parameters": parameter_count(cfg), "files": files,
                  "bytes": sum(files.values())},
        "training": (dict(training, corpus=corpus["provenance"]) if training else None),
        "checks": checks,
        "prompts": entries,
    }
    (folder / "expected.json").write_text(dump_expected(doc), encoding="utf-8")
    files = {p.name: p.stat().st_size for p in sorted(folder.iterdir())}
    return {"name": name, "bytes": sum(files.values()), "files": files, "parameters": parameter_count(cfg),
            "final_loss": training["final_loss"] if training else None, "checks": checks,
            "prompts": [(len(e["prompt_ids"]), len(e["hf_ids"]), e["hf_finish"]) for e in entries]}


def load_corpus(args) -> dict[str, Any]:
    import tokenizers
    tok = tokenizers.Tokenizer.from_file(str(args.tokenizer))
    eos = tok.token_to_id(EOS_TEXT)
    if eos is None:
        raise SystemExit(f"make_generate_fixtures: {args.tokenizer} has no {EOS_TEXT} token; train it with "
                         f"--special-tokens '{EOS_TEXT}'")
    docs = read_documents(args.corpus)
    ids = [e.ids for e in tok.encode_batch(docs, add_special_tokens=False)]
    ids = [d for d in ids if d]
    order = torch.randperm(len(ids), generator=torch.Generator().manual_seed(args.seed)).tolist()
    cut = max(1, len(ids) // 20)  # 5 % of the documents held out for the evaluation loss
    held, kept = [ids[i] for i in order[:cut]], [ids[i] for i in order[cut:]]
    train_ids = torch.tensor(token_stream(kept, eos), dtype=torch.long)  # (N)
    held_ids = torch.tensor(token_stream(held, eos), dtype=torch.long)
    print(f"make_generate_fixtures: corpus {args.corpus} → {len(ids)} documents, {train_ids.numel()} training "
          f"and {held_ids.numel()} held-out tokens; vocab {tok.get_vocab_size()}, EOS {eos}", flush=True)
    return {"vocab": tok.get_vocab_size(), "eos": eos, "train": train_ids, "held_out": held_ids,
            "train_docs": kept, "decode": lambda t: tok.decode(t, skip_special_tokens=False),
            "tokenizers_version": tokenizers.__version__,
            "provenance": {"file": Path(args.corpus).name, "bytes": Path(args.corpus).stat().st_size,
                           "sha256": sha256(Path(args.corpus)), "documents": len(ids),
                           "training_tokens": int(train_ids.numel()), "held_out_tokens": int(held_ids.numel()),
                           "tokenizer_sha256": sha256(Path(args.tokenizer))}}


# ---- main -------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--corpus", type=Path, help="English text to train on (the trained models)")
    p.add_argument("--tokenizer", type=Path, help="tokenizer.json of `microllm tokenizer train` (with <|endoftext|>)")
    p.add_argument("--out", type=Path, help="fixtures go to OUT/fixtures/<family>-<kind>/")
    p.add_argument("--families", default=",".join(FAMILIES))
    p.add_argument("--kinds", default=",".join(KINDS))
    p.add_argument("--device", default="cuda")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--overwrite", action="store_true", help="replace existing fixture folders")
    shape = p.add_argument_group("shapes")
    shape.add_argument("--hidden", type=int, default=128, help="trained models' hidden size")
    shape.add_argument("--random-hidden", type=int, default=128)
    shape.add_argument("--random-vocab", type=int, default=512)
    shape.add_argument("--intermediate", type=int, default=256)
    shape.add_argument("--layers", type=int, default=2)
    shape.add_argument("--heads", type=int, default=4)
    shape.add_argument("--kv-heads", type=int, default=2)
    shape.add_argument("--max-positions", type=int, default=256)
    tr = p.add_argument_group("training")
    tr.add_argument("--steps", type=int, default=400)
    tr.add_argument("--batch", type=int, default=32)
    tr.add_argument("--seq", type=int, default=128)
    tr.add_argument("--lr", type=float, default=3e-3)
    tr.add_argument("--warmup-steps", type=int, default=40)
    tr.add_argument("--max-final-loss", type=float, help="fail above this (default 0.75 · ln V)")
    ge = p.add_argument_group("expected outputs")
    ge.add_argument("--max-new-tokens", type=int, default=24)
    ge.add_argument("--prompt-lengths", default="1,3,8,17,40,64")
    ge.add_argument("--min-margin", type=float, default=1e-3,
                    help="every F32 step's top-1 − top-2 logit gap must reach this")
    ge.add_argument("--bf16-prefix", type=int, default=8, help="preferred: HF BF16 keeps F32's first N ids")
    ge.add_argument("--tries", type=int, default=32, help="candidate prompts per length")
    ge.add_argument("--no-logits", action="store_true", help="leave hf_logits_last out")
    p.add_argument("--self-check", action="store_true", help="check what runs without transformers, then exit")
    args = p.parse_args(argv)
    args.families = [f for f in args.families.split(",") if f]
    args.kinds = [k for k in args.kinds.split(",") if k]
    args.prompt_lengths = [int(v) for v in args.prompt_lengths.split(",") if v]
    bad = [f for f in args.families if f not in FAMILIES] + [k for k in args.kinds if k not in KINDS]
    if bad:
        p.error(f"unknown families or kinds: {bad}")
    if not args.self_check:
        if args.out is None:
            p.error("--out is required")
        if "trained" in args.kinds and (args.corpus is None or args.tokenizer is None):
            p.error("trained models need --corpus and --tokenizer")
        if max(args.prompt_lengths) + args.max_new_tokens > args.max_positions:
            p.error("--max-positions must hold the longest prompt plus --max-new-tokens")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.self_check:
        import generate_fixtures_self_check
        return generate_fixtures_self_check.self_check(args)
    torch.backends.cuda.matmul.allow_tf32 = False  # true F32 GEMMs, as microllm's F32 path
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    corpus = load_corpus(args) if "trained" in args.kinds else None
    rows = []
    for kind in args.kinds:
        for family in args.families:
            start = time.perf_counter()
            row = make_fixture(family, kind, args, args.out, corpus)
            rows.append(row)
            print(f"make_generate_fixtures: {row['name']}: {row['bytes'] / 1e6:.2f} MB in "
                  f"{time.perf_counter() - start:.1f} s; checks {row['checks']}", flush=True)
    (args.out / "fixtures" / "summary.json").write_text(json.dumps(rows, indent=2) + "\n")
    print(f"\n{'fixture':<16} {'parameters':>10} {'MB':>6} {'final loss':>10} {'min margin':>10} "
          f"{'EOS stops':>9} {'BF16 prefix':>11}  prompts (length, generated, finish)")
    for r in rows:
        c = r["checks"]
        loss = "—" if r["final_loss"] is None else f"{r['final_loss']:.3f}"
        print(f"{r['name']:<16} {r['parameters']:>10,} {r['bytes'] / 1e6:>6.2f} {loss:>10} {c['min_margin']:>10.3g} "
              f"{c['stopped_on_eos']:>9} {c['bf16_equal_prefix_min']:>11}  {r['prompts']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
