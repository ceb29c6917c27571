#!/usr/bin/env python3
"""Decode benchmark, microllm against PyTorch on the same GPU: runs microllm_bench_generate
per (model shape, batch, context) case and bench/generate/torch_generate.py (both PyTorch
peers, every case of a model shape in one process) after it, never at the same time, and
writes one record of kind "generate" per case (tools/records/record.py); prints a table last.

  python3 bench/generate/run_generate_bench.py --bench build/cuda-release/bench/microllm_bench_generate \\
      [--models qwen2.5-0.5b,deepseek-r1-distill-qwen-1.5b] [--batch 1,8,32,64] [--context 8,512,2048] \\
      [--new-tokens 128] [--warmup 2] [--reps 5] [--hf-reps 3] [--quick] \\
      [--records-dir bench/records] [--raw-dir DIR] [--table-out FILE]

Every side runs with random BF16 weights from the model's config.json, random prompt ids of
length `context` per sequence, greedy decoding of `new_tokens` tokens that never stops early.

A record's samples are microllm's decode tokens/s per repetition (units "tokens/s"); its
peer is the compiled static-cache PyTorch model (torch.compile reduce-overhead: CUDA graphs),
the faster of the two PyTorch peers; ratio_of_medians = microllm median / peer median, so
> 1 means microllm decodes faster (record.py's higher_is_better). Beside them:
  peers.hf_generate   transformers `generate` (SDPA), its samples, summary and ratio
  metrics             decode_tokens_per_s, prefill_ms, ttft_ms (and microllm's
                      host_ms_per_step and launch_ms_per_step): per side {values, summary}
  derived             medians, and ratios in the "> 1: microllm faster" direction for each
                      peer: decode microllm / peer, prefill and TTFT peer / microllm; microllm's
                      achieved decode bandwidth (decode_bytes_per_step × steps/s) and its
                      fraction of the 4.25 TB/s copy ceiling
  memory              peak_memory_bytes and kv_bytes per side; kernels_per_step (microllm)
  errors, checks      per side; the static peer's agreement with HF's ids and with eager
--modes graphs,eager also runs microllm with --no-cuda-graphs (cases named ...-eager).
Both programs' raw JSON go to --raw-dir. --quick: the Qwen2.5-0.5B shape, batch 1 and 8,
context 512, 64 new tokens, 3 repetitions. On a tree without .git set MICROLLM_GIT_COMMIT and
MICROLLM_GIT_DIRTY (see record.py).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parents[1]
sys.path.insert(0, str(REPO_ROOT / "tools" / "records"))
import record  # noqa: E402

CONFIGS = REPO_ROOT / "tests" / "fixtures" / "configs"
METRICS = {"decode_tokens_per_s": "tokens/s", "prefill_ms": "ms", "ttft_ms": "ms", "host_ms_per_step": "ms",
           "launch_ms_per_step": "ms"}
MICROLLM_ONLY = ("host_ms_per_step", "launch_ms_per_step")  # engine measurements, no peer has them
PEER_NAMES = {"static_compiled": "pytorch static KV cache, torch.compile reduce-overhead (CUDA graphs), SDPA",
              "hf_generate": "transformers generate, SDPA, DynamicCache"}
PRIMARY_PEER = "static_compiled"
COPY_TBPS = 4.25  # measured device-to-device copy ceiling of the H200 (GPU.md)


def ints(text: str) -> list[int]:
    return [int(v) for v in text.split(",") if v]


MODES = {"graphs": [], "eager": ["--no-cuda-graphs"]}  # microllm decode modes → driver flags


def case_name(model: str, batch: int, context: int, new_tokens: int, mode: str = "graphs") -> str:
    base = f"{model}-b{batch}-c{context}-n{new_tokens}"
    return base if mode == "graphs" else f"{base}-{mode}"


def run_json(name: str, argv: list[str], out: Path, timeout: float) -> tuple[dict | None, str | None]:
    """Runs a program that writes a JSON document to `out`; (document, error)."""
    print(f"run_generate_bench: {' '.join(argv)}", file=sys.stderr, flush=True)
    try:
        done = subprocess.run(argv, stdout=subprocess.PIPE, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return None, f"{name} ran past {timeout:.0f} s"
    except OSError as e:
        return None, f"{name} could not start: {e}"
    try:
        doc = json.loads(out.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as e:
        return None, f"{name} exited {done.returncode} without a JSON document in {out} ({e})"
    if done.returncode != 0:
        return doc, f"{name} exited {done.returncode}"
    return doc, None


def side(values: list[float] | None) -> dict[str, Any]:
    values = [float(v) for v in (values or [])]
    return {"values": values, "summary": record.summarize(values) if values else None}


def median(side_doc: dict[str, Any] | None) -> float | None:
    return side_doc["summary"]["median"] if side_doc and side_doc.get("summary") else None


def faster_ratio(ours: float | None, theirs: float | None, higher_is_better: bool) -> float | None:
    """> 1 means microllm is faster."""
    if ours is None or theirs is None or (ours if not higher_is_better else theirs) == 0:
        return None
    return ours / theirs if higher_is_better else theirs / ours


def build_record(model: str, config_path: str, batch: int, context: int, mode: str, args, ours: dict | None,
                 ours_error: str | None, peers: dict[str, dict | None], peer_errors: dict[str, str | None],
                 commands: dict[str, Any], provenance: dict[str, Any]) -> dict[str, Any]:
    """One record of kind "generate" for a case."""
    ours = ours or {}
    ours_samples = ours.get("samples", {})
    metrics: dict[str, Any] = {}
    for metric, units in METRICS.items():
        entry = {"units": units, "microllm": side(ours_samples.get(metric))}
        for peer, doc in peers.items():
            if metric not in MICROLLM_ONLY:
                entry[peer] = side((doc or {}).get("samples", {}).get(metric))
        metrics[metric] = entry
    decode = metrics["decode_tokens_per_s"]
    peer_arg = None
    if PRIMARY_PEER in peers:
        peer_arg = {"name": PEER_NAMES[PRIMARY_PEER], "samples": decode[PRIMARY_PEER]["values"]}
    config = {
        "case": case_name(model, batch, context, args.new_tokens, mode), "model": model, "config": config_path,
        "microllm_mode": mode,
        "model_type": provenance["model_types"].get(model), "dtype": "bf16", "device": "cuda",
        "batch": batch, "context": context, "new_tokens": args.new_tokens,
        "warmup": args.warmup, "reps": args.reps, "hf_reps": args.hf_reps or args.reps,
        "weights": "random", "prompts": "random ids, `context` per sequence", "decoding": "greedy, no early stop",
        "definitions": {
            "decode_tokens_per_s": "B · (N − 1) / time from the first generated token to the last",
            "ttft_ms": "start → first generated token on the host", "prefill_ms": "the prompt's forward pass"},
        "microllm_config": ours.get("config"), "commands": commands,
    }
    errors = {"microllm": ours_error or (None if decode["microllm"]["values"] else "no samples")}
    for peer in peers:
        errors[peer] = peer_errors.get(peer) or (None if decode[peer]["values"] else "no samples")
    rec = record.make_record("generate", config, decode["microllm"]["values"], "tokens/s", peer=peer_arg,
                             host=provenance["host"], versions=provenance["versions"], git=provenance["git"],
                             created=provenance["created"], higher_is_better=True)
    others = {}
    for peer in peers:
        if peer == PRIMARY_PEER:
            continue
        others[peer] = {"name": PEER_NAMES[peer], "samples": {"units": "tokens/s", "values": decode[peer]["values"]},
                        "summary": decode[peer]["summary"],
                        "ratio_of_medians": {"definition": record.ratio_definition(True),
                                             "value": record.ratio_of_medians(decode["microllm"]["summary"],
                                                                              decode[peer]["summary"], True)}}
    derived: dict[str, Any] = {"from": "medians; every ratio > 1 means microllm faster "
                                       "(decode: microllm / peer tokens/s; prefill, TTFT: peer / microllm ms)"}
    for metric in ("decode_tokens_per_s", "prefill_ms", "ttft_ms"):
        m = metrics[metric]
        derived[f"microllm_{metric}"] = median(m["microllm"])
        for peer in peers:
            derived[f"{peer}_{metric}"] = median(m[peer])
            derived[f"{metric}_ratio_vs_{peer}"] = faster_ratio(
                median(m["microllm"]), median(m[peer]), metric == "decode_tokens_per_s")
    for metric in MICROLLM_ONLY:
        derived[f"microllm_{metric}"] = median(metrics[metric]["microllm"])
    # Achieved bandwidth: the bytes a decode step must read × decode steps per second.
    step_bytes = (ours.get("decode_bytes_per_step") or {}).get("total")
    tokens_per_s = derived.get("microllm_decode_tokens_per_s")
    if step_bytes and tokens_per_s:
        derived["microllm_decode_tbps"] = step_bytes * tokens_per_s / batch / 1e12
        derived["microllm_decode_fraction_of_copy_ceiling"] = derived["microllm_decode_tbps"] / COPY_TBPS
    memory = {"microllm": {"peak_memory_bytes": ours.get("peak_memory_bytes"), "kv_bytes": ours.get("kv_bytes"),
                           "decode_bytes_per_step": ours.get("decode_bytes_per_step")}}
    checks = {}
    for peer, doc in peers.items():
        memory[peer] = {"peak_memory_bytes": (doc or {}).get("peak_memory_bytes"),
                        "kv_bytes": (doc or {}).get("kv_bytes")}
        for key in ("hf_prefix_agreement", "eager_prefix_agreement", "warmup_s", "cudagraph_skips"):
            if (doc or {}).get(key) is not None:
                checks[f"{peer}.{key}"] = doc[key]
    rec.update({"peers": others, "metrics": metrics, "derived": derived, "memory": memory,
                "kernels_per_step": ours.get("kernels_per_step"), "errors": errors, "checks": checks})
    return rec


def fmt(value: float | None, spec: str) -> str:
    return "—" if value is None else format(value, spec)


def table(records: list[dict[str, Any]]) -> str:
    head = (f"{'model':<30} {'mode':<6} {'B':>3} {'C':>5} {'microllm tok/s':>14} {'compiled tok/s':>14} "
            f"{'ratio':>6} {'HF tok/s':>9} {'ratio':>6} {'TTFT ms':>8} {'compiled':>8} {'host ms':>7} "
            f"{'kernels':>7} {'TB/s':>5} {'peak GiB':>8}")
    lines = [head, "-" * len(head)]
    for r in records:
        c, d = r["config"], r["derived"]
        peak = r["memory"]["microllm"]["peak_memory_bytes"]
        lines.append(
            f"{c['model']:<30} {c.get('microllm_mode', 'graphs'):<6} {c['batch']:>3} {c['context']:>5} "
            f"{fmt(d['microllm_decode_tokens_per_s'], ',.0f'):>14} "
            f"{fmt(d.get('static_compiled_decode_tokens_per_s'), ',.0f'):>14} "
            f"{fmt(d.get('decode_tokens_per_s_ratio_vs_static_compiled'), '.2f'):>6} "
            f"{fmt(d.get('hf_generate_decode_tokens_per_s'), ',.0f'):>9} "
            f"{fmt(d.get('decode_tokens_per_s_ratio_vs_hf_generate'), '.2f'):>6} "
            f"{fmt(d['microllm_ttft_ms'], '.1f'):>8} {fmt(d.get('static_compiled_ttft_ms'), '.1f'):>8} "
            f"{fmt(d.get('microllm_host_ms_per_step'), '.3f'):>7} {fmt(r.get('kernels_per_step'), 'd'):>7} "
            f"{fmt(d.get('microllm_decode_tbps'), '.2f'):>5} "
            f"{fmt(peak / 2**30 if peak else None, '.2f'):>8}")
        bad = {k: v for k, v in r["errors"].items() if v}
        if bad:
            lines.append(f"    errors: {bad}")
    lines.append("decode tokens/s medians; ratio = microllm / peer tokens/s (> 1: microllm faster); compiled = "
                 "PyTorch static KV cache under torch.compile reduce-overhead; HF = transformers generate; "
                 "mode: microllm decode with CUDA graphs or eager launches; host ms: microllm's host time "
                 "per step; kernels: nodes of one decode step; TB/s: bytes a decode step reads × steps/s")
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bench", required=True, help="path of the microllm_bench_generate executable")
    p.add_argument("--models", default="qwen2.5-0.5b,deepseek-r1-distill-qwen-1.5b",
                   help="folders of tests/fixtures/configs/ or paths of config.json files")
    p.add_argument("--batch", default="1,8,32,64")
    p.add_argument("--context", default="8,512,2048")
    p.add_argument("--new-tokens", type=int, default=128)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--hf-reps", type=int, default=3, help="timed runs of HF generate (slow at batch 1)")
    p.add_argument("--peers", default="hf,static", help="torch_generate.py peers: hf, static or both")
    p.add_argument("--modes", default="graphs", help="microllm decode modes: graphs, eager or both")
    p.add_argument("--skip-torch", action="store_true", help="microllm only (records without a peer)")
    p.add_argument("--quick", action="store_true", help="qwen2.5-0.5b, batch 1,8, context 512, 64 tokens, 3 reps")
    p.add_argument("--python", default=sys.executable, help="interpreter with torch + transformers")
    p.add_argument("--torch-script", default=str(HERE / "torch_generate.py"))
    p.add_argument("--case-timeout", type=float, default=600, help="seconds per microllm case")
    p.add_argument("--torch-timeout", type=float, default=3600, help="seconds per torch_generate.py run")
    p.add_argument("--records-dir", default=str(record.DEFAULT_RECORDS_DIR))
    p.add_argument("--raw-dir", help="both programs' raw JSON (default RECORDS_DIR/raw/<UTC time>-generate)")
    p.add_argument("--table-out", help="also write the table to this file")
    args = p.parse_args(argv)
    if args.quick:
        args.models, args.batch, args.context = "qwen2.5-0.5b", "1,8", "512"
        args.new_tokens, args.reps, args.hf_reps, args.warmup = 64, 3, 3, 1
    args.models = [m for m in args.models.split(",") if m]
    args.batch, args.context = ints(args.batch), ints(args.context)
    args.modes = [m for m in args.modes.split(",") if m]
    unknown = [m for m in args.modes if m not in MODES]
    if unknown:
        p.error(f"--modes takes {', '.join(MODES)}, found {', '.join(unknown)}")
    return args


def config_path(model: str) -> Path:
    path = Path(model)
    if path.suffix == ".json":
        return path
    return CONFIGS / model / "config.json"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    stamp = record.utc_now().strftime("%Y%m%dT%H%M%SZ")
    raw_dir = Path(args.raw_dir) if args.raw_dir else Path(args.records_dir) / "raw" / f"{stamp}-generate"
    raw_dir.mkdir(parents=True, exist_ok=True)
    git = record.git_state()
    if git["commit"] == "unknown":
        print("run_generate_bench: warning: no .git and no MICROLLM_GIT_COMMIT: records are marked dirty "
              "with an unknown commit", file=sys.stderr)
    results = []  # (model, config path, B, C, microllm doc, its error, its argv, torch doc, its error, its argv)
    model_types = {}
    for model in args.models:
        path = config_path(model)
        name = path.parent.name if path.name == "config.json" else path.stem
        try:
            model_types[name] = json.loads(path.read_text()).get("model_type")
        except (OSError, json.JSONDecodeError) as e:
            print(f"run_generate_bench: {path}: {e}", file=sys.stderr)
            return 2
        ours = {}
        for mode in args.modes:
            for b in args.batch:
                for c in args.context:
                    out = raw_dir / f"microllm-{case_name(name, b, c, args.new_tokens, mode)}.json"
                    argv = [args.bench, "--config", str(path), "--dtype", "bf16", "--device", "cuda",
                            "--batch", str(b), "--context", str(c), "--new-tokens", str(args.new_tokens),
                            "--warmup", str(args.warmup), "--reps", str(args.reps), "--out", str(out),
                            *MODES[mode]]
                    doc, error = run_json("microllm_bench_generate", argv, out, args.case_timeout)
                    ours[(mode, b, c)] = (doc, error, argv)
        peer_doc, peer_error, peer_argv = None, "skipped (--skip-torch)", None
        if not args.skip_torch:
            out = raw_dir / f"torch-{name}.json"
            peer_argv = [args.python, args.torch_script, "--config", str(path),
                         "--batch", ",".join(map(str, args.batch)), "--context", ",".join(map(str, args.context)),
                         "--new-tokens", str(args.new_tokens), "--warmup", str(max(1, args.warmup)),
                         "--reps", str(args.reps), "--hf-reps", str(args.hf_reps), "--peers", args.peers,
                         "--out", str(out)]
            peer_doc, peer_error = run_json("torch_generate.py", peer_argv, out, args.torch_timeout)
        for (mode, b, c), (doc, error, argv) in ours.items():
            results.append((name, str(path), mode, b, c, doc, error, argv, peer_doc, peer_error, peer_argv))

    host = record.host_info()
    created = record.utc_now()
    records, failed = [], False
    for name, path, mode, b, c, doc, error, argv, peer_doc, peer_error, peer_argv in results:
        peers: dict[str, dict | None] = {}
        peer_errors: dict[str, str | None] = {}
        if not args.skip_torch:
            for short in args.peers.split(","):
                peer = {"hf": "hf_generate", "static": "static_compiled"}[short]
                match = [x for x in (peer_doc or {}).get("cases", [])
                         if x.get("peer") == peer and x.get("batch") == b and x.get("context") == c]
                peers[peer] = match[0] if match else None
                peer_errors[peer] = (match[0].get("error") if match else None) or (None if match else peer_error or "not run")
        versions = dict((peer_doc or {}).get("versions") or {})
        provenance = {"host": host, "git": git, "created": created, "versions": versions, "model_types": model_types}
        commands = {"microllm": argv, "torch": peer_argv}
        rec = build_record(name, path, b, c, mode, args, doc, error, peers, peer_errors, commands, provenance)
        problems = record.validate(rec)
        if problems:
            print(f"run_generate_bench: {rec['config']['case']}: invalid record: {problems}", file=sys.stderr)
            failed = True
            continue
        written = record.write_record(rec, rec["config"]["case"], args.records_dir)
        print(f"run_generate_bench: wrote {written}", file=sys.stderr)
        records.append(rec)
        failed |= any(v for v in rec["errors"].values())
    text = table(records)
    if args.table_out:
        Path(args.table_out).write_text(text + "\n", encoding="utf-8")
    sys.stderr.flush()
    print(text, flush=True)
    return 1 if failed or not records else 0


if __name__ == "__main__":
    sys.exit(main())
