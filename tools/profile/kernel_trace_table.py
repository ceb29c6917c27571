#!/usr/bin/env python3
"""Summarizes the replays of one CUDA graph in a kernel trace (tools/profile/kernel_trace.cpp):
where a decode step's time goes as the graph runs it, programmatic launches overlapping.

A replay is one launch of the graph: its kernels, one per graph node, in start order. Per
node the table gives the median over replays of
  - the kernel's duration (end - start, from its first block to its last; with a programmatic
    launch this includes the part before its wait, overlapped with the kernel before it);
  - what it adds to the step: end - the previous kernel's end (the first kernel: end - start).
    These add up to the replay's span, from the first kernel's start to the last one's end,
    so they say which kernels, boundaries included, the step's time is made of.
Kernels of the same name are then summed, and the gap between replays (the host and the
graph launch between steps) is given. Where a run of nodes repeats (a decoder layer: the same
kernels in the same order, again and again), the mean repetition is given by position, with
what the nodes before and after it add. The graph shown is the one replayed most (the decode
bucket that ran), or --graph ID.

    kernel_trace_table.py [--graph ID] [--skip N] TRACE.csv
"""
import argparse
import collections
import csv
import re
import statistics
import sys
from dataclasses import dataclass


@dataclass(frozen=True)
class Kernel:
    start: int  # ns, GPU clock
    end: int
    graph: int  # 0 outside graphs
    node: int
    grid: str
    name: str


def load(path: str) -> list[Kernel]:
    try:
        with open(path, encoding="utf-8", newline="") as f:
            return [Kernel(int(r["start_ns"]), int(r["end_ns"]), int(r["graph"]),
                           int(r["graph_node"]), r["grid"], r["name"]) for r in csv.DictReader(f)]
    except OSError as error:
        raise SystemExit(f"kernel_trace_table: cannot read {path}: {error.strerror}") from None
    except (KeyError, ValueError) as error:
        raise SystemExit(f"kernel_trace_table: {path} is not a kernel trace (expected the "
                         f"columns of libmicrollm_kernel_trace.so): {error}") from None


def replays(kernels: list[Kernel], graph: int) -> list[list[Kernel]]:
    """The graph's replays in order, each its kernels by start. A replay is a run of one
    kernel per node; runs that do not have every node once (a trace cut short) are dropped."""
    mine = sorted((k for k in kernels if k.graph == graph), key=lambda k: (k.start, k.end))
    nodes = {k.node for k in mine}
    out, current, seen = [], [], set()
    for k in mine:
        if k.node in seen:  # a node again: the next replay has begun
            if seen == nodes:
                out.append(current)
            current, seen = [], set()
        current.append(k)
        seen.add(k.node)
    if current and seen == nodes:
        out.append(current)
    order = [k.node for k in out[0]] if out else []
    return [r for r in out if [k.node for k in r] == order]


def added(replay: list[Kernel]) -> list[int]:
    """What each kernel adds to the replay's span: end - previous end (first: end - start)."""
    return [replay[0].end - replay[0].start] + [
        max(0, k.end - prev.end) for prev, k in zip(replay, replay[1:])]


def short(name: str, width: int = 60) -> str:
    """The kernel's name without its namespaces and parameter list, cut to width."""
    if name.endswith(")"):  # drop the final, balanced (parameter list)
        depth = 0
        for i in range(len(name) - 1, -1, -1):
            depth += {")": 1, "(": -1}.get(name[i], 0)
            if depth == 0:
                name = name[:i]
                break
    name = re.sub(r"(?:\b[A-Za-z_][A-Za-z0-9_]*|\(anonymous namespace\))::", "", name)
    name = name.removeprefix("void ")
    return name if len(name) <= width else name[: width - 1] + "…"


def repeated_block(names: list[str]) -> tuple[int, int, int] | None:
    """(first node, period, repetitions) of the run of nodes that repeats back to back and
    covers the most nodes (at least two repetitions; the shorter period on a tie), or None."""
    best, n = None, len(names)
    for period in range(1, n // 2 + 1):
        for first in range(n - 2 * period + 1):
            block = names[first:first + period]
            repeats = 1
            while names[first + repeats * period:first + (repeats + 1) * period] == block:
                repeats += 1
            if repeats >= 2 and (best is None or period * repeats > best[1] * best[2]):
                best = (first, period, repeats)
    return best


def block_lines(names: list[str], duration: list[float], adds: list[float], span: float) -> list[str]:
    """The mean repetition of the repeated block, by position, and the nodes around it."""
    found = repeated_block(names)
    if found is None:
        return []
    first, period, repeats = found
    last = first + period * repeats  # one past the block
    lines = ["", f"repeated block: nodes {first}-{last - 1}, {repeats} repetitions of {period} "
                 f"kernels (means over the repetitions):",
             f"{'pos':>4}  {'kernel':<60} {'dur us':>8} {'adds us':>8} {'share':>6}"]
    for j in range(period):
        dur = statistics.fmean(duration[first + r * period + j] for r in range(repeats))
        add = statistics.fmean(adds[first + r * period + j] for r in range(repeats))
        lines.append(f"{j:>4}  {short(names[first + j]):<60} {dur / 1e3:>8.2f} {add / 1e3:>8.2f} "
                     f"{100 * add / span:>5.1f}%")
    one = sum(adds[first:last]) / repeats
    lines.append(f"{'':>4}  {'one repetition':<60} {'':>8} {one / 1e3:>8.2f} "
                 f"{100 * one / span:>5.1f}%")
    before, after = sum(adds[:first]), sum(adds[last:])
    lines.append(f"nodes before the block add {before / 1e3:.2f} us, after it {after / 1e3:.2f} us")
    return lines


def summarize(kernels: list[Kernel], graph: int | None = None, skip: int = 1) -> str:
    graphs = {k.graph for k in kernels if k.graph != 0}
    if not graphs:
        raise SystemExit("kernel_trace_table: no kernel of the trace ran in a CUDA graph")
    by_graph = {g: replays(kernels, g) for g in graphs}
    if graph is None:
        graph = max(by_graph, key=lambda g: (len(by_graph[g]), g))
    runs = by_graph.get(graph, [])[skip:]
    if not runs:
        raise SystemExit(f"kernel_trace_table: graph {graph} has no whole replay after the "
                         f"first {skip}")
    spans = [r[-1].end - r[0].start for r in runs]
    gaps = [b[0].start - a[-1].end for a, b in zip(runs, runs[1:])]
    n = len(runs[0])
    duration = [statistics.median(r[i].end - r[i].start for r in runs) for i in range(n)]
    adds = [statistics.median(col) for col in zip(*(added(r) for r in runs))]
    span = statistics.median(spans)
    lines = [f"graph {graph}: {len(runs)} replays (the first {skip} skipped), {n} kernels each; "
             f"span median {span / 1e3:.1f} us"
             + (f", gap between replays median {statistics.median(gaps) / 1e3:.1f} us" if gaps else ""),
             "",
             f"{'#':>4}  {'kernel':<60} {'grid':<16} {'dur us':>8} {'adds us':>8} {'share':>6}"]
    for i, k in enumerate(runs[0]):
        lines.append(f"{i:>4}  {short(k.name):<60} {k.grid:<16} {duration[i] / 1e3:>8.2f} "
                     f"{adds[i] / 1e3:>8.2f} {100 * adds[i] / span:>5.1f}%")
    by_name = collections.defaultdict(lambda: [0, 0.0, 0.0])
    for i, k in enumerate(runs[0]):
        entry = by_name[short(k.name)]
        entry[0] += 1
        entry[1] += duration[i]
        entry[2] += adds[i]
    lines += ["", "by kernel (sums of the medians above):",
              f"{'kernel':<60} {'count':>5} {'dur us':>8} {'adds us':>8} {'share':>6}"]
    for name, (count, dur, add) in sorted(by_name.items(), key=lambda e: -e[1][2]):
        lines.append(f"{name:<60} {count:>5} {dur / 1e3:>8.2f} {add / 1e3:>8.2f} "
                     f"{100 * add / span:>5.1f}%")
    lines.append("(medians per kernel need not add up to the median span)")
    lines += block_lines([k.name for k in runs[0]], duration, adds, span)
    return "\n".join(lines)


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace", help="CSV written by libmicrollm_kernel_trace.so")
    parser.add_argument("--graph", type=int, help="the graph id (default: the most replayed)")
    parser.add_argument("--skip", type=int, default=1, help="replays skipped first (warm-up)")
    args = parser.parse_args(argv)
    print(summarize(load(args.trace), args.graph, args.skip))


if __name__ == "__main__":
    main(sys.argv[1:])
