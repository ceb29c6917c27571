#!/usr/bin/env python3
"""Runs microllm_bench_ops and bench/ops/torch_ops.py with the same flags, pairs their cases
by name and writes one SPEC §4.12 record per case (kind "ops"); prints a short table last.

  python3 bench/ops/run_ops_bench.py build/cuda-release/bench/microllm_bench_ops \\
      [--warmup 10] [--repetitions 100] [--filter gemm,softmax] [--records-dir bench/records]

The two programs run one after the other on the same GPU (never at the same time). Each
record holds microllm's samples, PyTorch's as the peer, their summaries, the ratio of
medians (torch median / microllm median: > 1 means microllm is faster) and, under
"derived", the achieved rates from the medians against the measured H200 ceilings.
On a tree without .git, set MICROLLM_GIT_COMMIT and MICROLLM_GIT_DIRTY (see record.py).
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parents[1]
sys.path.insert(0, str(REPO_ROOT / "tools" / "records"))
import record  # noqa: E402


def run_tool(name: str, argv: list[str], raw_dir: Path | None) -> tuple[dict | None, str | None]:
    """Runs one benchmark program; its stderr (progress) passes through. Returns (doc, error)."""
    print(f"run_ops_bench: {' '.join(argv)}", file=sys.stderr, flush=True)
    try:
        done = subprocess.run(argv, stdout=subprocess.PIPE, text=True, check=False)
    except OSError as e:
        return None, f"{name} could not start: {e}"
    if raw_dir is not None:
        raw_dir.mkdir(parents=True, exist_ok=True)
        (raw_dir / f"{name}_ops.json").write_text(done.stdout, encoding="utf-8")
    try:
        doc = json.loads(done.stdout)
    except json.JSONDecodeError as e:
        return None, f"{name} exited {done.returncode} without a JSON document ({e})"
    error = doc.get("error")
    if done.returncode not in (0, 1) and not error:  # 1: some case failed, reported per case
        error = f"{name} exited {done.returncode}"
    return doc, error


def side_derived(case: dict | None, summary: dict | None) -> dict | None:
    """Achieved rates from the median of one side's samples."""
    if not case or not summary:
        return None
    seconds = summary["median"] * 1e-3
    tbps = case["bytes"] / seconds / 1e12
    tflops = case["flops"] / seconds / 1e12
    ceiling = case["ceiling"]["value"]
    fraction = tbps / ceiling if case["bound"] == "memory" else tflops / ceiling
    return {"median_ms": summary["median"], "achieved_tbps": tbps, "achieved_tflops": tflops,
            "ceiling_fraction": fraction}


def close(a: Any, b: Any) -> bool:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return math.isclose(a, b, rel_tol=1e-9)
    return a == b


def case_config(name: str, ours: dict | None, peer: dict | None, settings: dict) -> dict:
    base = ours or peer or {}
    config = {
        "case": name,
        "family": base.get("family"),
        "dtype": base.get("dtype"),
        "shape": base.get("shape"),
        "bytes": base.get("bytes"),
        "flops": base.get("flops"),
        "formula": base.get("formula"),
        "bound": base.get("bound"),
        "ceiling": base.get("ceiling"),
        "warmup": base.get("warmup"),
        "repetitions": {"microllm": (ours or {}).get("repetitions"),
                        "torch": (peer or {}).get("repetitions")},
        "repetitions_requested": base.get("repetitions_requested"),
        "input_sets": {"microllm": (ours or {}).get("input_sets"),
                       "torch": (peer or {}).get("input_sets")},
        "peak_allocated_bytes": {"microllm": (ours or {}).get("peak_allocated_bytes"),
                                 "torch": (peer or {}).get("peak_allocated_bytes")},
        "notes": {"microllm": (ours or {}).get("notes"), "torch": (peer or {}).get("notes")},
        **settings,
    }
    if ours and peer:
        differ = [k for k in ("dtype", "shape", "bytes", "flops", "bound") if not close(ours[k], peer[k])]
        if differ:
            config["mismatch"] = differ
            print(f"run_ops_bench: warning: {name}: microllm and torch differ in {differ}",
                  file=sys.stderr)
    return config


def fmt(value: float | None, spec: str) -> str:
    return "—" if value is None else format(value, spec)


def table(rows: list[dict]) -> str:
    head = (f"{'case':<42} {'microllm ms':>12} {'torch ms':>10} {'ratio':>7} "
            f"{'achieved':>16} {'% ceil':>7} {'torch %':>8}")
    lines = [head, "-" * len(head)]
    for r in rows:
        d, p = r["derived"], r["peer_derived"]
        if d is None:
            achieved = "error" if r["error"] else "—"
            percent = "—"
        else:
            memory = r["bound"] == "memory"
            achieved = (f"{d['achieved_tbps']:.2f} TB/s" if memory
                        else f"{d['achieved_tflops']:.1f} TFLOP/s")
            percent = f"{100 * d['ceiling_fraction']:.1f}"
        lines.append(
            f"{r['name']:<42} {fmt(d and d['median_ms'], '.4f'):>12} "
            f"{fmt(p and p['median_ms'], '.4f'):>10} {fmt(r['ratio'], '.2f'):>7} {achieved:>16} "
            f"{percent:>7} {fmt(p and 100 * p['ceiling_fraction'], '.1f'):>8}")
    lines.append("ratio = torch median / microllm median (> 1: microllm faster); % ceil against "
                 "4.25 TB/s copy, 794 (BF16) / 51 (F32) TFLOP/s GEMM")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("bench", help="path of the microllm_bench_ops executable")
    p.add_argument("--python", default=sys.executable, help="interpreter with torch for torch_ops.py")
    p.add_argument("--torch-script", default=str(HERE / "torch_ops.py"))
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--repetitions", type=int, default=100)
    p.add_argument("--filter", default="")
    p.add_argument("--attention-batch", type=int, default=8)
    p.add_argument("--max-case-seconds", type=float, default=30.0)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--rms-norm", choices=("fused", "hf"), default="fused", help="torch side only")
    p.add_argument("--gqa", choices=("enable_gqa", "repeat"), default="enable_gqa", help="torch side only")
    p.add_argument("--skip-torch", action="store_true", help="microllm only (records have no peer)")
    p.add_argument("--records-dir", default=str(record.DEFAULT_RECORDS_DIR))
    p.add_argument("--raw-dir", help="also keep both programs' raw JSON here")
    p.add_argument("--table-out", help="also write the table to this file")
    args = p.parse_args(argv)

    common = ["--warmup", str(args.warmup), "--repetitions", str(args.repetitions),
              "--attention-batch", str(args.attention_batch),
              "--max-case-seconds", str(args.max_case_seconds), "--seed", str(args.seed)]
    if args.filter:
        common += ["--filter", args.filter]
    raw_dir = Path(args.raw_dir) if args.raw_dir else None
    ours_argv = [args.bench] + common
    ours_doc, ours_error = run_tool("microllm", ours_argv, raw_dir)
    peer_argv = [args.python, args.torch_script] + common + ["--rms-norm", args.rms_norm, "--gqa", args.gqa]
    peer_doc, peer_error = (None, "skipped (--skip-torch)") if args.skip_torch else \
        run_tool("torch", peer_argv, raw_dir)

    ours_cases = {c["name"]: c for c in (ours_doc or {}).get("cases", [])}
    peer_cases = {c["name"]: c for c in (peer_doc or {}).get("cases", [])}
    names = list(ours_cases) + [n for n in peer_cases if n not in ours_cases]

    # Provenance shared by every record of this run; clocks are read right after the runs.
    device = (ours_doc or {}).get("device") or (peer_doc or {}).get("device") or {}
    host = record.host_info(cuda=device.get("cuda_runtime"))
    git = record.git_state()
    if git["commit"] == "unknown":
        print("run_ops_bench: warning: no .git and no MICROLLM_GIT_COMMIT: records are marked "
              "dirty with an unknown commit", file=sys.stderr)
    versions: dict[str, Any] = {}
    if peer_doc and peer_doc.get("versions"):
        versions.update({"torch": peer_doc["versions"].get("torch"),
                         "torch_cuda": peer_doc["versions"].get("cuda"),
                         "cudnn": peer_doc["versions"].get("cudnn")})
    settings = {"attention_batch": args.attention_batch, "seed": args.seed,
                "max_case_seconds": args.max_case_seconds, "torch_rms_norm": args.rms_norm,
                "torch_gqa": args.gqa, "device": device,
                "commands": {"microllm": ours_argv, "torch": None if args.skip_torch else peer_argv},
                "timing": (ours_doc or peer_doc or {}).get("timing"),
                "rotation": (ours_doc or peer_doc or {}).get("settings", {}).get("rotation")}
    created = record.utc_now()

    rows, failed = [], bool(ours_error or (peer_error and not args.skip_torch))
    for name in names:
        ours, peer = ours_cases.get(name), peer_cases.get(name)
        errors = {"microllm": (ours or {}).get("error") or (None if ours else ours_error or "not run"),
                  "torch": (peer or {}).get("error") or (None if peer else peer_error or "not run")}
        failed |= bool(errors["microllm"]) or (bool(errors["torch"]) and not args.skip_torch)
        peer_arg = None if args.skip_torch else {"name": "torch", "samples": (peer or {}).get("samples_ms", [])}
        rec = record.make_record(
            "ops", case_config(name, ours, peer, settings), (ours or {}).get("samples_ms", []), "ms",
            peer=peer_arg, host=host, versions=versions, git=git, created=created)
        derived = side_derived(ours or peer, rec["summary"])
        peer_derived = side_derived(peer or ours, rec.get("peer", {}).get("summary"))
        rec["derived"] = {"from": "medians; TB/s = bytes / median; TFLOP/s = flops / median; "
                                  "ceiling_fraction against config.ceiling",
                          "microllm": derived, "torch": peer_derived}
        rec["errors"] = errors
        path = record.write_record(rec, name, args.records_dir)
        print(f"run_ops_bench: wrote {path}", file=sys.stderr)
        rows.append({"name": name, "bound": (ours or peer)["bound"], "derived": derived,
                     "peer_derived": peer_derived, "ratio": (rec.get("ratio_of_medians") or {}).get("value"),
                     "error": errors["microllm"]})

    for side, error in (("microllm", ours_error), ("torch", None if args.skip_torch else peer_error)):
        if error:
            print(f"run_ops_bench: {side}: {error}", file=sys.stderr)
    text = table(rows)
    if args.table_out:
        Path(args.table_out).write_text(text + "\n", encoding="utf-8")
    sys.stderr.flush()
    print(text, flush=True)
    return 1 if failed or not rows else 0


if __name__ == "__main__":
    sys.exit(main())
