#!/usr/bin/env python3
"""The table of an A/B run of scripts/gpu/train_ab.sh: training tokens/s per side.

Input: a folder holding `<side>-<round>/` folders (side: base or new), each with the train
record run_train_bench.py wrote (`train/*.json` below it). Per side the table lists every
round's tokens/s (the record's median step), their median, the median of each stage's
per-round medians, the largest peak memory, and the ratio new / base of the medians.

    train_ab_table.py FOLDER
"""
import json
import re
import statistics
import sys
from pathlib import Path

RUN = re.compile(r"^(?P<side>base|new)-(?P<round>\d+)$")


def collect(folder: Path) -> dict[str, list[dict]]:
    """side → the derived fields of its rounds' records, in round order."""
    sides: dict[str, list[tuple[int, dict]]] = {}
    for run in sorted(p for p in folder.iterdir() if p.is_dir()):
        m = RUN.match(run.name)
        if not m:
            continue
        for path in sorted(run.rglob("*.json")):
            try:
                derived = json.loads(path.read_text(encoding="utf-8"))["derived"]
            except (OSError, json.JSONDecodeError, KeyError) as e:
                print(f"train_ab_table: {path}: {e}", file=sys.stderr)
                continue
            sides.setdefault(m["side"], []).append((int(m["round"]), derived))
    return {side: [d for _, d in sorted(runs, key=lambda r: r[0])] for side, runs in sides.items()}


def summary(runs: list[dict]) -> tuple[list[float], float, dict[str, float], int | None]:
    rates = [r["microllm_tokens_per_s"] for r in runs]
    stages: dict[str, list[float]] = {}
    for r in runs:
        for name, ms in (r.get("microllm_stage_ms") or {}).items():
            stages.setdefault(name, []).append(ms)
    peaks = [r["microllm_peak_bytes"] for r in runs if r.get("microllm_peak_bytes")]
    return (rates, statistics.median(rates) if rates else float("nan"),
            {k: statistics.median(v) for k, v in stages.items()}, max(peaks) if peaks else None)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    sides = collect(Path(argv[1]))
    if not sides:
        print(f"train_ab_table: no A/B records in {argv[1]}", file=sys.stderr)
        return 1
    print("| side | tokens/s (rounds) | median | stages (ms, medians) | peak GB |")
    print("|---|---|---|---|---|")
    medians = {}
    for side in ("base", "new"):
        if side not in sides:
            continue
        rates, median, stages, peak = summary(sides[side])
        medians[side] = median
        stage_text = ", ".join(f"{k} {v:.1f}" for k, v in stages.items()) or "-"
        peak_text = f"{peak / 1e9:.2f}" if peak else "-"
        print(f"| {side} | {', '.join(f'{x:,.0f}' for x in rates)} | {median:,.0f} | {stage_text} | {peak_text} |")
    if "base" in medians and "new" in medians:
        print(f"new / base: {medians['new'] / medians['base']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
