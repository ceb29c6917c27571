#!/usr/bin/env python3
"""Compares the microllm and PyTorch records of a model alignment run (tools/alignment/run.py).

Values (PREFIX_values.jsonl) and training values (PREFIX_training_values.jsonl) pair by
kind + name + occurrence; PyTorch is the reference. Each pair is checked for presence, dtype,
shape and truncation, then element by element: |a − b| ≤ atol + rtol·|ref|. Reported per
pair: max abs difference with its flat index and both values there, max relative difference
(|a − b| / |ref| over elements with ref ≠ 0), MSE and cosine similarity (1 when both are all
zero). The run fails on any missing checkpoint, any parameter without a gradient on either
side (the list of parameters is microllm_parameters.jsonl), any dtype or shape difference,
any element outside tolerance, and any truncated capture unless --partial. A matching loss
alone never passes: every gradient is compared.

Timings (operator, layer, backward) give min, mean, median, p95 and max per side (statistics
of tools/records/record.py) and the ratio PyTorch median / microllm median (> 1: microllm
faster).

  compare.py --output OUTDIR --atol 3e-5 --rtol 3e-5 [--partial]
writes OUTDIR/comparison.json and OUTDIR/report.md; exits 1 when the comparison fails.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "records"))
import record  # noqa: E402  (summary statistics shared with benchmark records)

# The operator alignment's metrics (cosine similarity with its zero-vector rule), loaded under
# another name since both files are called compare.py.
_spec = importlib.util.spec_from_file_location("operator_compare", Path(__file__).resolve().parent / "operators" / "compare.py")
operator_compare = importlib.util.module_from_spec(_spec)
sys.modules["operator_compare"] = operator_compare  # its dataclasses look themselves up there
_spec.loader.exec_module(operator_compare)

VALUE_FILES = {"forward": "values", "training": "training_values"}
TIMING_FILES = {"operator": "operator_timing", "layer": "layer_timing", "backward": "backward_timing"}


def load_jsonl(path: Path) -> list:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def keyed(records: list) -> dict:
    return {(r["kind"], r["name"], r["occurrence"]): r for r in records}


def compare_pair(key, got: dict | None, ref: dict | None, atol: float, rtol: float, partial: bool) -> dict:
    kind, name, occurrence = key
    row = {"kind": kind, "name": name, "occurrence": occurrence, "problems": []}
    if got is None or ref is None:
        row["problems"].append("missing in " + ("microllm" if got is None else "pytorch"))
        row["status"] = "FAIL"
        return row
    row.update(category=ref.get("category", kind), dtype=ref["dtype"], shape=ref["shape"], numel=ref["numel"])
    if got["dtype"] != ref["dtype"]:
        row["problems"].append(f"dtype {got['dtype']} vs {ref['dtype']}")
    if got["shape"] != ref["shape"]:
        row["problems"].append(f"shape {got['shape']} vs {ref['shape']}")
    truncated = got["truncated"] or ref["truncated"]
    row["truncated"] = truncated
    if truncated and not partial:
        row["problems"].append(f"truncated capture ({got['captured']} of {got['numel']} elements); "
                               "pass --partial to accept")
    n = min(len(got["values"]), len(ref["values"]))
    if len(got["values"]) != len(ref["values"]):
        row["problems"].append(f"captured {len(got['values'])} vs {len(ref['values'])} elements")
    a = np.asarray(got["values"][:n], dtype=np.float64)
    b = np.asarray(ref["values"][:n], dtype=np.float64)
    row["compared"] = n
    if n:
        diff = np.abs(a - b)
        bound = atol + rtol * np.abs(b)
        worst = int(np.argmax(diff))
        nonzero = b != 0
        rel = diff[nonzero] / np.abs(b[nonzero]) if nonzero.any() else np.zeros(1)
        row.update(max_abs=float(diff[worst]), max_abs_index=worst, microllm_at_max=float(a[worst]),
                   pytorch_at_max=float(b[worst]), max_rel=float(rel.max()), mse=float(np.mean((a - b) ** 2)),
                   cosine=operator_compare.cosine(a, b),
                   outside_tolerance=int(np.count_nonzero(~(diff <= bound))),
                   worst_over_bound=float(np.max(diff / bound)))
        if row["outside_tolerance"]:
            row["problems"].append(f"{row['outside_tolerance']} of {n} elements outside atol + rtol·|ref|")
    row["status"] = "FAIL" if row["problems"] else "PASS"
    return row


def compare_values(out: Path, stem: str, atol: float, rtol: float, partial: bool) -> list:
    got = keyed(load_jsonl(out / f"microllm_{stem}.jsonl"))
    ref = keyed(load_jsonl(out / f"pytorch_{stem}.jsonl"))
    order = list(ref) + [k for k in got if k not in ref]
    return [compare_pair(k, got.get(k), ref.get(k), atol, rtol, partial) for k in order]


def gradient_coverage(out: Path, rows: list) -> list:
    """A row for every parameter that lacks a gradient record (checked on both sides)."""
    parameters = [r["name"] for r in load_jsonl(out / "microllm_parameters.jsonl")]
    have = {r["name"] for r in rows
            if r["kind"] == "gradient" and not any(q.startswith("missing in") for q in r["problems"])}
    problems = []
    for name in parameters:
        if name not in have:
            problems.append({"kind": "gradient", "name": name, "occurrence": 0, "status": "FAIL",
                             "problems": ["parameter without a gradient"]})
    if not parameters:
        problems.append({"kind": "parameter", "name": "*", "occurrence": 0, "status": "FAIL",
                         "problems": ["microllm_parameters.jsonl is missing or empty"]})
    return problems


def compare_timings(out: Path, stem: str) -> list:
    got = keyed(load_jsonl(out / f"microllm_{stem}.jsonl"))
    ref = keyed(load_jsonl(out / f"pytorch_{stem}.jsonl"))
    rows = []
    for key in list(got) + [k for k in ref if k not in got]:
        row = {"name": key[1], "occurrence": key[2]}
        for side, records in (("microllm", got), ("pytorch", ref)):
            if key in records:
                s = record.summarize(records[key]["samples"])
                row[side] = {k: s[k] for k in ("min", "mean", "median", "p95", "max", "count")}
        if "microllm" in row and "pytorch" in row and row["microllm"]["median"] > 0:
            row["ratio_pytorch_over_microllm"] = row["pytorch"]["median"] / row["microllm"]["median"]
        rows.append(row)
    return rows


def fmt(x, spec=".3g") -> str:
    return "—" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)


def report(result: dict) -> str:
    lines = [f"# Model alignment: {result['status']}", ""]
    m = result.get("manifest", {})
    if m:
        lines += [f"microllm on `{m.get('microllm_device')}` vs PyTorch on `{m.get('pytorch_device')}`, "
                  f"dtype {m.get('dtype')}, model `{m.get('model')}`, commit `{m.get('git', {}).get('commit')}`"
                  f" (dirty: {m.get('git', {}).get('dirty')}), seed {m.get('seed')}, "
                  f"tolerance |a−b| ≤ {result['atol']} + {result['rtol']}·|ref|"
                  + (", partial captures accepted" if result["partial"] else "") + ".", ""]
    lines += ["| domain | checkpoints | passed | failed | worst max abs | at |", "|---|---|---|---|---|---|"]
    for domain, d in result["domains"].items():
        lines.append(f"| {domain} | {d['checkpoints']} | {d['passed']} | {d['failed']} | "
                     f"{fmt(d['worst_max_abs'])} | `{d['worst_name']}` |")
    failures = [r for r in result["checkpoints"] if r["status"] == "FAIL"]
    if failures:
        lines += ["", "## Failures", ""]
        for r in failures[:50]:
            lines.append(f"- `{r['kind']} {r['name']}#{r['occurrence']}`: {'; '.join(r['problems'])}")
        if len(failures) > 50:
            lines.append(f"- … and {len(failures) - 50} more (comparison.json)")
    worst = sorted((r for r in result["checkpoints"] if "worst_over_bound" in r),
                   key=lambda r: -r["worst_over_bound"])[:12]
    lines += ["", "## Worst checkpoints (largest difference relative to the tolerance)", "",
              "| kind | name | shape | max abs | microllm | pytorch | max rel | cosine | diff / bound |",
              "|---|---|---|---|---|---|---|---|---|"]
    for r in worst:
        lines.append(f"| {r['kind']} | `{r['name']}` | {r['shape']} | {fmt(r['max_abs'])} | "
                     f"{fmt(r['microllm_at_max'], '.6g')} | {fmt(r['pytorch_at_max'], '.6g')} | {fmt(r['max_rel'])} | "
                     f"{fmt(r['cosine'], '.9f')} | {fmt(r['worst_over_bound'])} |")
    for domain, rows in result["timings"].items():
        lines += ["", f"## {domain.capitalize()} timing (ms; ratio = PyTorch median / microllm median, > 1: "
                  "microllm faster)", "",
                  "| name | microllm min | median | p95 | max | PyTorch min | median | p95 | max | ratio |",
                  "|---|---|---|---|---|---|---|---|---|---|"]
        for r in rows:
            a, b = r.get("microllm", {}), r.get("pytorch", {})
            lines.append(f"| `{r['name']}` | {fmt(a.get('min'))} | {fmt(a.get('median'))} | {fmt(a.get('p95'))} | "
                         f"{fmt(a.get('max'))} | {fmt(b.get('min'))} | {fmt(b.get('median'))} | {fmt(b.get('p95'))} | "
                         f"{fmt(b.get('max'))} | {fmt(r.get('ratio_pytorch_over_microllm'), '.2f')} |")
    lines += ["", "Timings of a tiny model are dominated by launch and framework overhead; they do not "
              "predict the speed of a large model. Every range synchronizes the device at both ends.", ""]
    return "\n".join(lines)


def domain_summary(rows: list) -> dict:
    with_diff = [r for r in rows if "max_abs" in r]
    worst = max(with_diff, key=lambda r: r["max_abs"], default=None)
    return {"checkpoints": len(rows), "passed": sum(r["status"] == "PASS" for r in rows),
            "failed": sum(r["status"] == "FAIL" for r in rows),
            "worst_max_abs": worst["max_abs"] if worst else None,
            "worst_name": f"{worst['kind']} {worst['name']}" if worst else None}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--output", required=True)
    p.add_argument("--atol", type=float, default=3e-5)
    p.add_argument("--rtol", type=float, default=3e-5)
    p.add_argument("--partial", action="store_true")
    args = p.parse_args()
    out = Path(args.output)
    forward = compare_values(out, VALUE_FILES["forward"], args.atol, args.rtol, args.partial)
    training = compare_values(out, VALUE_FILES["training"], args.atol, args.rtol, args.partial)
    training += gradient_coverage(out, training)
    # Split the forward domain as the report reads it: operators, layers, model output.
    domains = {"forward operators": [r for r in forward if r.get("category") in ("operator", "input")],
               "forward layers": [r for r in forward if r.get("category") == "layer"],
               "forward output": [r for r in forward if r.get("category") == "output"],
               "forward missing": [r for r in forward if "category" not in r],
               "loss": [r for r in training if r["kind"] == "loss"],
               "gradients": [r for r in training if r["kind"] != "loss"]}
    domains = {k: v for k, v in domains.items() if v or k in ("loss", "gradients", "forward output")}
    checkpoints = forward + training
    status = "PASS" if checkpoints and all(r["status"] == "PASS" for r in checkpoints) and domains["loss"] else "FAIL"
    manifest_path = out / "manifest.json"
    result = {"status": status, "atol": args.atol, "rtol": args.rtol, "partial": args.partial,
              "manifest": json.loads(manifest_path.read_text()) if manifest_path.exists() else {},
              "domains": {k: domain_summary(v) for k, v in domains.items()},
              "checkpoints": checkpoints,
              "timings": {k: compare_timings(out, stem) for k, stem in TIMING_FILES.items()}}
    text = report(result)
    result.pop("manifest")
    (out / "comparison.json").write_text(json.dumps(result, indent=1) + "\n")
    (out / "report.md").write_text(text)
    print(text.split("\n## Worst")[0])
    return 0 if status == "PASS" else 1


if __name__ == "__main__":
    sys.exit(main())
