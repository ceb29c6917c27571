#!/usr/bin/env python3
"""The table of an A/B run of scripts/gpu/decode_ab.sh: decode tokens/s per case and side.

Input: the folder of microllm_bench_generate JSON documents named
`<model>-b<B>-c<C>-<side>-<round>.json` (side: base or new). Each document holds the median
of its repetitions' decode tokens/s; the table lists every round's value, the median over the
rounds, kernels per step and the ratio new / base of the medians.

    decode_ab_table.py FOLDER
"""
import json
import re
import statistics
import sys
from pathlib import Path

NAME = re.compile(r"^(?P<case>.+)-(?P<side>base|new)-(?P<round>\d+)\.json$")


def collect(folder: Path) -> dict[str, dict[str, list[dict]]]:
    """case → side → the documents of its rounds, in round order."""
    cases: dict[str, dict[str, list[dict]]] = {}
    for path in sorted(folder.glob("*.json"), key=lambda p: p.name):
        m = NAME.match(path.name)
        if not m:
            continue
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as e:
            print(f"decode_ab_table: {path}: {e}", file=sys.stderr)
            continue
        cases.setdefault(m["case"], {}).setdefault(m["side"], []).append(doc)
    return cases


def tokens_per_s(doc: dict) -> float:
    return statistics.median(doc["samples"]["decode_tokens_per_s"])


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    cases = collect(Path(argv[1]))
    if not cases:
        print(f"decode_ab_table: no A/B documents in {argv[1]}", file=sys.stderr)
        return 1
    print("| case | base tokens/s (rounds) | new tokens/s (rounds) | base median | new median | new / base | kernels base / new |")
    print("|---|---|---|---|---|---|---|")
    for case, sides in sorted(cases.items()):
        base, new = sides.get("base", []), sides.get("new", [])
        b = [tokens_per_s(d) for d in base]
        n = [tokens_per_s(d) for d in new]
        bm = statistics.median(b) if b else float("nan")
        nm = statistics.median(n) if n else float("nan")
        kernels = f"{base[0].get('kernels_per_step') if base else '-'} / {new[0].get('kernels_per_step') if new else '-'}"
        print(f"| {case} | {', '.join(f'{x:,.0f}' for x in b)} | {', '.join(f'{x:,.0f}' for x in n)} | "
              f"{bm:,.0f} | {nm:,.0f} | {nm / bm:.3f} | {kernels} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
