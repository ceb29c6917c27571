#!/usr/bin/env python3
"""Training throughput, microllm against PyTorch in one run on the same GPU; one record.

Runs `microllm train` on random tokens (config, B, T, BF16 compute with F32 master weights,
AdamW, clipping) and parses its per-step seconds, then bench/train/torch_train_step.py with
the same shape (F32 master, BF16 autocast, SDPA, fused AdamW), and writes one record of kind
"train" (tools/records/record.py): samples are step seconds after the warm-up steps for both
sides, the ratio of medians is PyTorch / microllm (> 1: microllm faster), and tokens/s are
derived from the medians, with the model FLOPs utilization of each side (training FLOPs per
token from `microllm inspect`, causal attention counted at T/2 keys a token, over the
measured 794 TFLOP/s BF16 GEMM ceiling of the H200) and microllm's median time per stage
(`microllm train`'s stage line: forward — the loss included — backward, communication wait,
optimizer).

  run_train_bench.py --microllm build/.../microllm --config tests/fixtures/configs/qwen2.5-0.5b/config.json \
      --batch 8 --seq 1024 --steps 10 --warmup 2 --records-dir $OUT/records [--no-peer]
"""

import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tools" / "records"))
import record  # noqa: E402


def token_file(path: Path, vocab: int) -> None:
    ids = np.random.default_rng(0).integers(0, vocab, size=4_000_000, dtype=np.uint32)
    ids.tofile(path)
    path.with_name(path.name + ".json").write_text(json.dumps(
        {"format": "microllm-tokens-v1", "dtype": "uint32", "count": int(ids.size),
         "sha256": hashlib.sha256(ids.tobytes()).hexdigest(), "vocab_size": vocab}))


# The dense BF16 GEMM ceiling measured on the H200 (../shared/GPU.md, SPEC §8): MFU's denominator.
BF16_PEAK_FLOPS = 794e12
STAGE_NAMES = ("forward", "backward", "comm wait", "optimizer")


def training_flops_per_token(microllm: str, config: str, seq: int) -> float:
    """3 × forward FLOPs per token, attention at seq / 2 keys (a causal window's average)."""
    proc = subprocess.run([microllm, "inspect", "--config", config, "--json", "--context",
                           str(max(1, seq // 2))], capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"run_train_bench: microllm inspect failed: {proc.stderr.strip()}")
    return float(json.loads(proc.stdout)["training_flops_per_token"])


def stage_medians(stdout: str) -> dict[str, float] | None:
    """Rank 0's median ms per stage from `microllm train`'s stage lines, or None."""
    m = re.search(r"^stage time per step, median of \d+ step\(s\), ms:\n\s*rank 0 (.*)$", stdout, re.M)
    if not m:
        return None
    out = {}
    for name in STAGE_NAMES:
        value = re.search(re.escape(name) + r" ([0-9.]+)", m.group(1))
        if value is None:
            return None
        out[name] = float(value.group(1))
    return out


def kernel_switches(environ=os.environ) -> dict[str, str]:
    """The MICROLLM_* switches set for the run (bench/kernel_switches.h names them), so that a
    record of a side of an A/B says which it ran under; the commit and dirty overrides are
    provenance, not switches."""
    return {k: v for k, v in sorted(environ.items())
            if k.startswith("MICROLLM_") and k not in ("MICROLLM_GIT_COMMIT", "MICROLLM_GIT_DIRTY")}


def mfu(tokens_per_s: float | None, flops_per_token: float) -> float | None:
    return None if tokens_per_s is None else tokens_per_s * flops_per_token / BF16_PEAK_FLOPS


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--microllm", required=True)
    p.add_argument("--config", required=True)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--steps", type=int, default=10, help="timed steps")
    p.add_argument("--warmup", type=int, default=2, help="untimed steps first")
    p.add_argument("--device", default="cuda")
    p.add_argument("--records-dir", default=str(record.DEFAULT_RECORDS_DIR))
    p.add_argument("--no-peer", action="store_true")
    p.add_argument("--loss-chunk", type=int, default=0,
                   help="microllm train --loss-chunk (0: the whole logits)")
    p.add_argument("--attention", choices=["auto", "flash", "reference"], default="auto",
                   help="microllm train --attention (auto: flash on CUDA in bf16)")
    p.add_argument("--recompute", action="store_true",
                   help="microllm train --recompute (layer activations recomputed in backward)")
    p.add_argument("--no-compile-peer", action="store_true",
                   help="skip the torch.compile peer (it compiles for about a minute)")
    args = p.parse_args()
    cfg = json.loads(Path(args.config).read_text())
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "train.bin"
        token_file(data, cfg["vocab_size"])
        argv = [args.microllm, "train", "--config", args.config, "--data", str(data),
                "--steps", str(args.warmup + args.steps), "--batch", str(args.batch), "--seq", str(args.seq),
                "--lr", "1e-4", "--warmup", "2", "--device", args.device, "--dtype", "bf16", "--log-every", "1",
                "--out", str(Path(tmp) / "run")]
        if args.loss_chunk:
            argv += ["--loss-chunk", str(args.loss_chunk)]
        if args.attention != "auto":
            argv += ["--attention", args.attention]
        if args.recompute:
            argv.append("--recompute")
        proc = subprocess.run(argv, capture_output=True, text=True)
        sys.stdout.write(proc.stdout[-3000:])
        if proc.returncode != 0:
            sys.stderr.write(proc.stderr[-3000:])
            return 1
    # Step lines: step, loss, lr, grad norm, tokens/s (last); seconds = tokens per step / rate.
    tokens = args.batch * args.seq
    rows = [line.split() for line in proc.stdout.splitlines()]
    seconds = [tokens / float(r[-1]) for r in rows if len(r) >= 5 and r[0].isdigit() and int(r[0]) > args.warmup]
    if not seconds:
        sys.stderr.write("run_train_bench: no step lines in the output of microllm train\n")
        return 1
    peak = re.search(r"^peak device memory: (\d+) bytes allocated", proc.stdout, re.M)
    stages = stage_medians(proc.stdout)
    flops = training_flops_per_token(args.microllm, args.config, args.seq)
    peer = None
    versions = {}
    compiled = None

    def torch_step(extra):
        torch_proc = subprocess.run([sys.executable, str(REPO / "bench" / "train" / "torch_train_step.py"),
                                     "--config", args.config, "--batch", str(args.batch), "--seq", str(args.seq),
                                     "--steps", str(args.steps), "--warmup", str(args.warmup)] + extra,
                                    capture_output=True, text=True)
        if torch_proc.returncode != 0:
            sys.stderr.write(torch_proc.stderr[-3000:])
            return None
        return json.loads(torch_proc.stdout.strip().splitlines()[-1])

    if not args.no_peer:
        result = torch_step([])
        if result is None:
            return 1
        peer = {"name": "pytorch eager (F32 master, BF16 autocast, SDPA, fused AdamW)", "samples": result["seconds"]}
        versions = {"torch": result["torch"], "transformers": result["transformers"]}
        if not args.no_compile_peer:
            compiled = torch_step(["--compile"])
            if compiled is None:
                return 1
    config = {"model": cfg.get("model_type"), "config": args.config, "batch": args.batch, "seq": args.seq,
              "dtype": "bf16 compute, f32 master", "optimizer": "adamw", "warmup_steps": args.warmup,
              "timed_steps": args.steps, "tokens_per_step": tokens}
    if args.loss_chunk:
        config["loss_chunk"] = args.loss_chunk
    if args.attention != "auto":
        config["attention"] = args.attention
    if args.recompute:
        config["recompute"] = True
    if kernel_switches():
        config["switches"] = kernel_switches()
    ours_rate = tokens / record.summarize(seconds)["median"]
    peer_rate = tokens / record.summarize(peer["samples"])["median"] if peer else None
    compiled_rate = tokens / record.summarize(compiled["seconds"])["median"] if compiled else None
    rec = record.make_record("train", config, seconds, "s", peer=peer, versions=versions,
                             host=record.host_info(), extra={"derived": {
                                 "microllm_tokens_per_s": ours_rate,
                                 "peer_tokens_per_s": peer_rate,
                                 "training_flops_per_token": flops,
                                 "mfu": {"definition": "tokens/s × training FLOPs per token (3 × forward, "
                                                       f"attention at T/2 keys) / {BF16_PEAK_FLOPS / 1e12:.0f} TFLOP/s",
                                         "microllm": mfu(ours_rate, flops), "peer": mfu(peer_rate, flops),
                                         "compiled_peer": mfu(compiled_rate, flops)},
                                 "microllm_stage_ms": stages,
                                 "microllm_peak_bytes": int(peak.group(1)) if peak else None,
                                 "peer_peak_bytes": result["peak_bytes"] if peer else None,
                                 "compiled_peer": None if compiled is None else {
                                     "name": "pytorch torch.compile (the same step, compiled model)",
                                     "samples": compiled["seconds"],
                                     "median": record.summarize(compiled["seconds"])["median"],
                                     "tokens_per_s": tokens / record.summarize(compiled["seconds"])["median"],
                                     "peak_bytes": compiled["peak_bytes"]}}})
    # The 0.5B shape keeps its historical name; other configs add their folder name.
    folder = Path(args.config).parent.name
    shape = "" if folder == "qwen2.5-0.5b" else f"-{folder}"
    name = f"{cfg.get('model_type')}{shape}-b{args.batch}-t{args.seq}"
    if args.loss_chunk:
        name += f"-lc{args.loss_chunk}"
    if args.attention != "auto":
        name += f"-{args.attention}"
    if args.recompute:
        name += "-recompute"
    path = record.write_record(rec, name, args.records_dir)
    d = rec["derived"]
    compiled_rate = d["compiled_peer"]["tokens_per_s"] if d.get("compiled_peer") else float("nan")
    if stages:
        print("train_bench: microllm stages (ms, median): "
              + ", ".join(f"{k} {v:.1f}" for k, v in stages.items()) + f"; MFU {d['mfu']['microllm']:.3f}")
    print(f"train_bench: microllm {d['microllm_tokens_per_s']:.0f} tokens/s, PyTorch eager "
          f"{d['peer_tokens_per_s'] or float('nan'):.0f} tokens/s, torch.compile {compiled_rate:.0f} tokens/s, ratio (PyTorch/microllm step time) "
          f"{(rec.get('ratio_of_medians') or {}).get('value')}; record {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
