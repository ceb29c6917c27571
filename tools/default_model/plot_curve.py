#!/usr/bin/python3
"""Draws the default model's loss curve as an SVG from its training record (standard library
only): training loss per step (thin line) and validation loss per pass (dots), nats/token
against the optimizer step.

  plot_curve.py RECORD.json OUT.svg
"""

import json
import math
import sys
from pathlib import Path

W, H = 720, 420
LEFT, RIGHT, TOP, BOTTOM = 64, 20, 36, 48


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2:
        sys.exit("usage: plot_curve.py RECORD.json OUT.svg")
    record = json.loads(Path(argv[0]).read_text())
    train = record["curve"]["train"]
    val = record["curve"]["validation"]
    steps = max(s for s, _ in train + val)
    losses = [v for _, v in train + val]
    lo = math.floor(min(losses) * 2) / 2
    hi = math.ceil(min(max(losses), lo + 8) * 2) / 2  # the first steps (≈ ln V) clipped

    def x(step):
        return LEFT + (W - LEFT - RIGHT) * step / steps

    def y(loss):
        loss = min(max(loss, lo), hi)
        return TOP + (H - TOP - BOTTOM) * (hi - loss) / (hi - lo)

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" '
           f'viewBox="0 0 {W} {H}" font-family="sans-serif" font-size="12">',
           f'<rect width="{W}" height="{H}" fill="white"/>']
    tick = 0.5 if hi - lo <= 4 else 1.0
    value = lo
    while value <= hi + 1e-9:
        out.append(f'<line x1="{LEFT}" x2="{W - RIGHT}" y1="{y(value):.1f}" y2="{y(value):.1f}" '
                   'stroke="#e4e4e4"/>')
        out.append(f'<text x="{LEFT - 6}" y="{y(value) + 4:.1f}" text-anchor="end">{value:g}</text>')
        value += tick
    step_tick = 10 ** math.floor(math.log10(steps)) / (2 if steps / 10 ** math.floor(math.log10(steps)) < 4 else 1)
    s = 0.0
    while s <= steps + 1e-9:
        out.append(f'<text x="{x(s):.1f}" y="{H - BOTTOM + 18}" text-anchor="middle">{s:g}</text>')
        s += step_tick
    out.append(f'<line x1="{LEFT}" x2="{W - RIGHT}" y1="{H - BOTTOM}" y2="{H - BOTTOM}" stroke="black"/>')
    out.append(f'<line x1="{LEFT}" x2="{LEFT}" y1="{TOP}" y2="{H - BOTTOM}" stroke="black"/>')
    points = " ".join(f"{x(st):.1f},{y(v):.1f}" for st, v in train)
    out.append(f'<polyline points="{points}" fill="none" stroke="#4a7bd0" stroke-width="1"/>')
    for st, v in val:
        out.append(f'<circle cx="{x(st):.1f}" cy="{y(v):.1f}" r="3.5" fill="#d0553a"/>')
    out.append(f'<text x="{(LEFT + W - RIGHT) / 2}" y="{H - 10}" text-anchor="middle">optimizer step '
               f'({record["config"]["batch"]} × {record["config"]["seq"]} tokens)</text>')
    out.append(f'<text x="14" y="{(TOP + H - BOTTOM) / 2}" text-anchor="middle" '
               f'transform="rotate(-90 14 {(TOP + H - BOTTOM) / 2})">loss, nats/token</text>')
    out.append(f'<text x="{LEFT}" y="22" font-size="14">{record["config"]["model"]}: training '
               f'loss (line) and validation loss (dots); final validation '
               f'{record["final_validation_loss"]:.3f}</text>')
    out.append("</svg>")
    Path(argv[1]).write_text("\n".join(out) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
