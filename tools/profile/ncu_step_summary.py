#!/usr/bin/env python3
"""Sums the kernels of one step in an Nsight Compute CSV by kernel name.

Input: the CSV of `ncu --metrics gpu__time_duration.sum --csv --print-units base` over a
`microllm_bench_generate` run (scripts/gpu/profile_decode.sh writes it) or, with --train,
over a `microllm train` run of at least three steps (scripts/gpu/profile_train.sh). A decode step launches
`gather_rows_kernel` twice, first for the token embeddings and last for the sequences' last
rows (then the LM head, sampling and log-probabilities): the last step runs from the
second-to-last gather to the end. A training step starts with the embedding's
gather_rows_kernel and ends with the optimizer's adamw_kernel launches: --train sums the
second-to-last whole step (from a gather that follows an optimizer launch to the next such
gather), so the profile's last step, followed by the run's end, is not counted. The sums are
printed by kernel family (GEMM, attention, loss, optimizer, copies, other: CATEGORIES) and
by kernel name and grid. ncu serializes
kernels and flushes caches before each, so a duration bounds its in-graph time from above;
the shares rank the kernels, their sum is not the step time.

    ncu_step_summary.py [--train] PROFILE.csv [PROFILE.csv ...]
"""
import collections
import csv
import re
import sys

def kernels(path: str) -> list[tuple[str, float, str]]:
    """(short name, microseconds, grid) per profiled kernel, in launch order."""
    with open(path, encoding="utf-8") as f:
        lines = [line for line in f if line.startswith('"')]  # skip ncu's log lines
    out = []
    for row in csv.DictReader(lines):
        name = re.sub(r"\(.*", "", row["Kernel Name"]).replace("void ops::<unnamed>::", "")
        out.append((name, float(row["Metric Value"].replace(",", "")) / 1000.0, row["Grid Size"]))
    return out


def last_step(ks: list[tuple[str, float, str]]) -> list[tuple[str, float, str]]:
    gathers = [i for i, (name, _, _) in enumerate(ks) if name.startswith("gather_rows")]
    if len(gathers) < 2:
        raise SystemExit("ncu_step_summary: fewer than two decode steps in the profile")
    return ks[gathers[-2]:]


def train_step(ks: list[tuple[str, float, str]]) -> list[tuple[str, float, str]]:
    starts, optimized = [], True  # a step starts at the first gather after an optimizer launch
    for i, (name, _, _) in enumerate(ks):
        if name.startswith("gather_rows") and optimized:
            starts.append(i)
            optimized = False
        elif name.startswith("adamw_kernel"):
            optimized = True
    if len(starts) < 3:
        raise SystemExit("ncu_step_summary: fewer than three training steps in the profile")
    return ks[starts[-2]:starts[-1]]


# Kernel families of a step, by name: the first pattern that matches names the family.
CATEGORIES = (
    ("GEMM and GEMV", re.compile(r"nvjet|sm90_xmma|cutlass|splitKreduce|gemm|gemv", re.I)),
    ("attention", re.compile(r"^(flash_|attention_|paged_attention)")),
    ("loss", re.compile(r"cross_entropy|mean_over_kept")),
    ("optimizer", re.compile(r"^(adamw|squares|sum_partials|sgd)|ops::<unnamed>::sum_partials")),
    ("copies and conversions", re.compile(r"copy_words|convert(_float)?_kernel")),
)


def category(name: str) -> str:
    for label, pattern in CATEGORIES:
        if pattern.search(name):
            return label
    return "other (elementwise, norms, RoPE, embedding, reductions)"


def category_totals(step: list[tuple[str, float, str]]) -> dict[str, float]:
    totals: dict[str, float] = collections.defaultdict(float)
    for name, t, _ in step:
        totals[category(name)] += t
    return dict(totals)


def category_lines(step: list[tuple[str, float, str]]) -> list[str]:
    totals = category_totals(step)
    total = sum(totals.values())
    return [f"  {label:<58} {t:9.1f} us {100 * t / total:5.1f} %"
            for label, t in sorted(totals.items(), key=lambda kv: -kv[1])]


def summary(path: str, train: bool = False) -> str:
    step = train_step(kernels(path)) if train else last_step(kernels(path))
    total = sum(t for _, t, _ in step)
    groups: dict[str, list[float]] = collections.OrderedDict()
    for name, t, grid in step:
        groups.setdefault(f"{name[:55]} grid {grid}", []).append(t)
    lines = [f"{path}: {'a whole training' if train else 'last'} step {len(step)} kernels, {total:.1f} us summed",
             "by family:", *category_lines(step), "by kernel:"]
    for key, times in sorted(groups.items(), key=lambda kv: -sum(kv[1])):
        s = sum(times)
        lines.append(f"  {len(times):4d} x {key:<72} {s:8.1f} us {100 * s / total:5.1f} %"
                     f"  ({s / len(times):.2f} each)")
    return "\n".join(lines)


if __name__ == "__main__":
    args = sys.argv[1:]
    train = "--train" in args
    paths = [a for a in args if a != "--train"]
    if not paths:
        raise SystemExit(__doc__)
    print("\n".join(summary(p, train) for p in paths))
