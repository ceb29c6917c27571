#!/usr/bin/env python3
"""Operator alignment: every microllm operator against PyTorch FP32 on synthetic inputs.

One command generates the inputs (generate.py) into OUTDIR/<operator>/<kind>/, runs
`microllm_alignment operator` on each case (outputs in <case>/microllm/), runs the PyTorch
reference (reference.py, outputs in <case>/pytorch/), compares every output and input
gradient (compare.py) and writes
  OUTDIR/<operator>/comparison.json   every case, output and metric of one operator
  OUTDIR/summary.json                 provenance, tolerances, one row per compared output
  OUTDIR/report.md                    the table printed at the end
It exits 0 when everything passes, 1 when a comparison fails or microllm fails on a case,
and 2 on bad usage (missing binary, no torch, OUTDIR already holding results without
--overwrite, unknown operator).

  run_operators.py --microllm-binary build/cpu-release/apps/microllm_alignment/microllm_alignment \\
      --output OUTDIR [--device cpu|cuda] [--pytorch-device cpu|cuda] [--ops a,b] [--overwrite]
      [--drop-arrays]

See docs/alignment.md for the operators, the input kinds and the tolerances.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

try:
    import numpy as np
except ImportError as e:  # before anything else: the one-line error of a Python without NumPy
    print(f"run_operators.py: error: NumPy is needed ({e}); run with a Python that has numpy and torch "
          "(Debian: /usr/bin/python3 with python3-numpy and python3-torch)", file=sys.stderr)
    sys.exit(2)

import compare  # noqa: E402
import generate  # noqa: E402
import tolerances  # noqa: E402

REPO = Path(__file__).resolve().parents[3]
RESULT_FILES = ("summary.json", "report.md")


class UsageError(Exception):
    """Bad input to the tool: one line on stderr, exit code 2."""


# ---- running one case ----------------------------------------------------------------------
def run_microllm(binary: Path, case_dir: Path, device: str, timeout: float) -> dict:
    out = case_dir / "microllm"
    start = time.perf_counter()
    try:
        proc = subprocess.run([str(binary), "operator", "--case", str(case_dir), "--out", str(out),
                               "--device", device], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"rc": None, "seconds": timeout, "error": f"timed out after {timeout:g} s"}
    (case_dir / "microllm.log").write_text(proc.stdout + proc.stderr)
    result = {"rc": proc.returncode, "seconds": round(time.perf_counter() - start, 3)}
    if proc.returncode != 0:
        lines = [l for l in proc.stderr.splitlines() if l.strip()]
        result["error"] = lines[-1] if lines else f"exit code {proc.returncode}, no message"
    return result


def run_reference(case_dir: Path, device: str):
    """PyTorch FP32 on the device (saved in <case>/pytorch/) and F64 on the CPU (the exact
    answer, kept in memory): ({stem: array}, {stem: array}, seconds)."""
    import reference  # imported by import_torch() once torch is known to load

    start = time.perf_counter()
    ref = reference.run_case(case_dir, device)
    seconds = round(time.perf_counter() - start, 3)
    (case_dir / "pytorch").mkdir(exist_ok=True)
    for name, value in ref.items():
        np.save(case_dir / "pytorch" / f"{name}.npy", value)
    return ref, reference.run_case(case_dir, "cpu", dtype="f64"), seconds


def run_case(binary: Path, case_dir: Path, args) -> dict:
    spec = json.loads((case_dir / "case.json").read_text())
    row = {"kind": spec["kind"], "inputs": spec["shapes"], "outputs": [], "problems": []}
    row["microllm"] = run_microllm(binary, case_dir, args.device, args.timeout)
    try:
        ref, truth, seconds = run_reference(case_dir, args.pytorch_device)
    except Exception as e:  # a reference that cannot run fails the case, with the reason
        row["problems"].append(f"PyTorch reference failed: {type(e).__name__}: {e}")
        ref, truth, seconds = {}, {}, None
    row["pytorch"] = {"seconds": seconds, "files": [f"{name}.npy" for name in ref]}
    if row["microllm"]["rc"] != 0:
        row["problems"].append("microllm failed: " + row["microllm"]["error"])
    if row["problems"]:
        row["pass"] = False
        return row
    inputs = {i["name"]: np.load(case_dir / f"{i['name']}.npy") for i in spec["inputs"]}
    grads = {p.stem.replace("grad_output_", "").replace("grad_output", "out"): np.load(p)
             for p in case_dir.glob("grad_output*.npy")}  # upstream gradients by output name
    got = {p.stem for p in (case_dir / "microllm").glob("*.npy")}
    for extra in sorted(got - set(ref)):
        row["problems"].append(f"microllm wrote {extra}.npy, PyTorch has no such output")
    for name in ref:
        if name not in got:
            row["outputs"].append({"output": name, "pass": False, "problems": ["missing in microllm's outputs"]})
            continue
        tol, rounding = tolerances.tolerance(spec["op"], name, inputs, grads, spec.get("args", {}))
        row["outputs"].append(compare.compare(name, np.load(case_dir / "microllm" / f"{name}.npy"),
                                              ref[name], tol, rounding, truth[name]))
    row["pass"] = not row["problems"] and all(o["pass"] for o in row["outputs"])
    return row


def run_operator(binary: Path, op: generate.Operator, args) -> dict:
    result = {"operator": op.name, "microllm_op": op.op, "what": op.what, "backward": op.backward,
              "device": args.device, "pytorch_device": args.pytorch_device, "cases": []}
    for kind in generate.KINDS:
        case_dir = generate.write_case(args.output, op, kind)
        result["cases"].append(run_case(binary, case_dir, args))
    result["pass"] = all(c["pass"] for c in result["cases"])
    (args.output / op.name / "comparison.json").write_text(json.dumps(result, indent=1) + "\n")
    if args.drop_arrays:
        for p in (args.output / op.name).rglob("*.npy"):
            p.unlink()
    return result


# ---- reports -------------------------------------------------------------------------------
def table_rows(results: list) -> list:
    """One row per compared output; a case that produced none (microllm failed) gets one row."""
    rows = []
    for r in results:
        for case in r["cases"]:
            for o in case["outputs"] or [{"output": "-", "pass": False, "problems": []}]:
                rows.append({"operator": r["operator"], "kind": case["kind"], "output": o["output"],
                             "shape": o.get("shape"), "max_abs": o.get("max_abs"), "mean_abs": o.get("mean_abs"),
                             "cosine": o.get("cosine"), "worst_ratio": o.get("worst_ratio"),
                             "pytorch_vs_f64": o.get("pytorch_vs_f64"), "rule": o.get("rule"),
                             "pass": bool(o["pass"] and not case["problems"]),
                             "problems": case["problems"] + o.get("problems", [])})
    return rows


def fmt(x, spec: str) -> str:
    return "n/a" if x is None else format(x, spec)


def report_markdown(summary: dict) -> str:
    lines = [
        "# Operator alignment: microllm vs PyTorch FP32", "",
        f"microllm on `{summary['device']}`, PyTorch {summary['versions']['torch']} on "
        f"`{summary['pytorch_device']}`; commit `{summary['git']['commit']}`"
        f"{' (dirty tree)' if summary['git']['dirty'] else ''}; {summary['created_utc']}.", "",
        f"Pass rule per element: {summary['tolerance_rule']}. "
        "`bound ratio` is the worst |microllm − PyTorch| / bound (≤ 1 passes); `PyTorch vs F64` is the "
        "max abs error of the FP32 reference itself against the same reference in F64. See docs/alignment.md.", "",
        "| operator | input kind | output | shape | max abs | mean abs | cosine | bound ratio | PyTorch vs F64 "
        "| pass |",
        "|---|---|---|---|---:|---:|---:|---:|---:|---|",
    ]
    for r in summary["rows"]:
        shape = "×".join(str(s) for s in r["shape"]) if r["shape"] is not None else "-"
        shape = shape or "scalar"
        lines.append(f"| {r['operator']} | {r['kind']} | {r['output']} | {shape} | {fmt(r['max_abs'], '.3g')} | "
                     f"{fmt(r['mean_abs'], '.3g')} | {fmt(r['cosine'], '.9f')} | {fmt(r['worst_ratio'], '.3f')} | "
                     f"{fmt(r['pytorch_vs_f64'], '.3g')} | {'pass' if r['pass'] else 'FAIL'} |")
    lines += ["", "| operator | what | backward | cases | worst max abs | worst bound ratio | pass |",
              "|---|---|---|---:|---:|---:|---|"]
    for o in summary["operators"]:
        lines.append(f"| {o['operator']} | {o['what']} | {'yes' if o['backward'] else 'no'} | {o['cases']} | "
                     f"{fmt(o['worst_max_abs'], '.3g')} | "
                     f"{fmt(o['worst_ratio'], '.3f')} | {'pass' if o['pass'] else 'FAIL'} |")
    failures = [r for r in summary["rows"] if not r["pass"]]
    lines += ["", f"**{'PASS' if summary['pass'] else 'FAIL'}**: {len(summary['rows']) - len(failures)} of "
              f"{len(summary['rows'])} comparisons pass."]
    for r in failures:
        lines.append(f"- {r['operator']}/{r['kind']}/{r['output']}: {'; '.join(r['problems'])}")
    return "\n".join(lines) + "\n"


def git_state() -> dict:
    try:
        commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True,
                                text=True, check=True).stdout.strip()
        dirty = bool(subprocess.run(["git", "-C", str(REPO), "status", "--porcelain"], capture_output=True,
                                    text=True, check=True).stdout.strip())
        return {"commit": commit, "dirty": dirty}
    except (OSError, subprocess.CalledProcessError):
        return {"commit": None, "dirty": None}


def summarize(results: list, args, torch_version: str, seconds: float) -> dict:
    rows = table_rows(results)
    operators = []
    for r in results:
        mine = [x for x in rows if x["operator"] == r["operator"]]
        numbers = lambda key: [x[key] for x in mine if x[key] is not None]
        operators.append({"operator": r["operator"], "what": r["what"], "backward": r["backward"],
                          "cases": len(r["cases"]), "pass": r["pass"],
                          "worst_max_abs": max(numbers("max_abs"), default=None),
                          "worst_ratio": max(numbers("worst_ratio"), default=None)})
    return {
        "schema": "microllm-operator-alignment-v1",
        "created_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "command": sys.argv, "git": git_state(), "microllm_binary": str(args.microllm_binary),
        "device": args.device, "pytorch_device": args.pytorch_device,
        "versions": {"python": platform.python_version(), "numpy": np.__version__, "torch": torch_version},
        "shapes": {"B": generate.B, "T": generate.T, "C": generate.C, "H": generate.H, "Hkv": generate.HKV,
                   "D": generate.D, "F": generate.F, "V": generate.V, "embedding_rows": generate.EMBED_ROWS},
        "kinds": list(generate.KINDS),
        "tolerance_rule": f"|a − b| ≤ {compare.ATOL:g} + {compare.RTOL:g}·|ref| + rounding, the rounding term "
                          "derived from F32 error analysis for linear, attention and rope (tolerances.py)",
        "seconds": round(seconds, 1), "operators": operators, "rows": rows,
        "pass": all(r["pass"] for r in results),
    }


# ---- the command ---------------------------------------------------------------------------
def prepare_output(out: Path, overwrite: bool) -> None:
    """Refuses an OUTDIR holding results unless --overwrite, which removes exactly those."""
    held = [out / f for f in RESULT_FILES if (out / f).exists()]
    held += [out / name for name in generate.OPERATORS if (out / name).exists()]
    if held and not overwrite:
        raise UsageError(f"{out} already holds results ({', '.join(p.name for p in held[:4])}"
                         f"{', ...' if len(held) > 4 else ''}); pass --overwrite to replace them "
                         "or choose another --output")
    for p in held:
        shutil.rmtree(p) if p.is_dir() else p.unlink()
    out.mkdir(parents=True, exist_ok=True)


def import_torch(pytorch_device: str):
    try:
        import torch
    except ImportError as e:
        raise UsageError(f"PyTorch is needed for the reference but `import torch` failed ({e}); "
                         f"run with a Python that has torch (Debian: /usr/bin/python3 with python3-torch)") from e
    if pytorch_device.startswith("cuda") and not torch.cuda.is_available():
        raise UsageError(f"--pytorch-device {pytorch_device}: this torch ({torch.__version__}) sees no CUDA device")
    import reference
    reference.fp32_only()
    return torch


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--microllm-binary", required=True, type=Path, help="the microllm_alignment executable")
    parser.add_argument("--output", required=True, type=Path, help="folder for the cases and reports")
    parser.add_argument("--device", default="cpu", help="microllm device: cpu, cuda or cuda:N (default cpu)")
    parser.add_argument("--pytorch-device", default="cpu", help="PyTorch device: cpu, cuda or cuda:N (default cpu)")
    parser.add_argument("--ops", help="comma-separated operators (default: all): " + ",".join(generate.OPERATORS))
    parser.add_argument("--overwrite", action="store_true", help="replace the results an OUTDIR already holds")
    parser.add_argument("--drop-arrays", action="store_true",
                        help="delete each operator's .npy files once compared (keep case.json, logs, reports)")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds allowed per microllm case")
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    start = time.perf_counter()
    try:
        for flag, value in (("--device", args.device), ("--pytorch-device", args.pytorch_device)):
            if not (value == "cpu" or value == "cuda" or (value.startswith("cuda:") and value[5:].isdigit())):
                raise UsageError(f"{flag} must be cpu, cuda or cuda:N, found '{value}'")
        binary = args.microllm_binary
        if not binary.is_file() or not os.access(binary, os.X_OK):
            raise UsageError(f"microllm binary {binary} {'is not executable' if binary.is_file() else 'does not exist'}"
                             " (build the microllm_alignment target: ninja -C build/<preset> microllm_alignment)")
        try:
            operators = generate.select(args.ops)
        except ValueError as e:
            raise UsageError(str(e)) from e
        torch = import_torch(args.pytorch_device)
        prepare_output(args.output, args.overwrite)
    except UsageError as e:
        print(f"run_operators.py: error: {e}", file=sys.stderr)
        return 2
    args.microllm_binary = binary.resolve()

    results = []
    for op in operators:
        results.append(run_operator(args.microllm_binary, op, args))
        failed = [c for c in results[-1]["cases"] if not c["pass"]]
        first = [f"{c['kind']}: {p}" for c in failed for p in c["problems"]
                 + [q for o in c["outputs"] for q in o.get("problems", [])]][:1]
        print(f"{op.name:<14} {'FAIL ' + first[0] if first else 'FAIL' if failed else 'pass'}", flush=True)
    summary = summarize(results, args, torch.__version__, time.perf_counter() - start)
    (args.output / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    report = report_markdown(summary)
    (args.output / "report.md").write_text(report)
    print()
    print(report, end="")
    print(f"\nwrote {args.output / 'report.md'} and {args.output / 'summary.json'} in {summary['seconds']} s")
    return 0 if summary["pass"] else 1


if __name__ == "__main__":
    sys.exit(main())
