#!/usr/bin/env python3
"""Writes the synthetic inputs of the operator alignment (docs/alignment.md).

Every operator gets one folder per input kind, OUTDIR/<operator>/<kind>/, holding the
inputs as F32 / int64 .npy files, the upstream gradients of a backward pass
(grad_output.npy, grad_output_<name>.npy) where the operator runs one, and a case.json in
the protocol of apps/microllm_alignment/operator_cases.h (read by `microllm_alignment
operator` and by reference.py), plus the keys "operator", "kind" and "shapes".

Shapes are those of a realistic model (SPEC §4.12): hidden C=2048, H=32 query heads,
Hkv=4 KV heads, head dim D=128, FFN width F=5472, vocabulary V=151936, batch B=1 with T=4
tokens. Only the embedding table is cut to 256 rows (a gather: the values do not depend
on the number of rows, and the ids cover the first and the last row).

Input kinds (the floating inputs; ids, targets and positions are listed per operator):
  sequential    evenly spaced values over [-1, 1] across the whole tensor
  zeros         activations all zero; parameters (weights, biases) random
  ones          every floating input one
  small_random  normal, standard deviation 0.01
  random        normal at model scale: activations std 1, weights std 1/sqrt(fan-in)
  extreme       per operator: ±80 logits and rows that need the max subtracted (softmax,
                cross-entropy), SiLU gates up to ±1e4 across exp's overflow at -88.7,
                RMSNorm rows with mean squares from 1e-6 to 0 (eps dominates) and the fused
                add cancelling to 1e-6, to rounding residue and to exactly zero, attention
                scores of standard deviation ~36 (nearly one-hot softmax), RoPE positions up
                to 131071, linear inputs with outlier channels at ±1000, embedding ids at the
                first and last rows, repeated.
Values are drawn with NumPy from seeds derived from (operator, kind, input name), so a run
is reproducible and each file is independent of which operators are selected.

  generate.py --output OUTDIR [--ops silu,softmax]
"""

from __future__ import annotations

import argparse
import json
import sys
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

# Model shapes (docs/alignment.md).
B, T = 1, 4  # batch, tokens
C = 2048  # hidden width
H, HKV, D = 32, 4, 128  # query heads, KV heads, head dim
F = 5472  # FFN width
V = 151936  # vocabulary (softmax over logits, cross-entropy)
EMBED_ROWS = 256  # embedding table rows (see the module docstring)
ROPE_THETA = 1e6
RMS_EPS = 1e-6
IGNORE = -100

KINDS = ("sequential", "zeros", "ones", "small_random", "random", "extreme")


@dataclass
class Input:
    name: str
    value: np.ndarray
    requires_grad: bool = True


class Draw:
    """Values of one case: reproducible per (operator, kind, input name)."""

    def __init__(self, operator: str, kind: str):
        self.operator, self.kind = operator, kind

    def rng(self, name: str) -> np.random.Generator:
        return np.random.default_rng(zlib.crc32(f"{self.operator}/{self.kind}/{name}".encode()))

    def normal(self, name: str, shape, std: float = 1.0) -> np.ndarray:
        return (self.rng(name).standard_normal(shape) * std).astype(np.float32)

    def integers(self, name: str, low: int, high: int, shape) -> np.ndarray:
        return self.rng(name).integers(low, high, shape).astype(np.int64)

    def floating(self, name: str, shape, parameter: bool = False, std: float = 1.0) -> np.ndarray:
        """A floating input for the common kinds; `std` is its model-scale deviation."""
        shape = tuple(shape)
        if self.kind == "sequential":
            return np.linspace(-1.0, 1.0, int(np.prod(shape))).reshape(shape).astype(np.float32)
        if self.kind == "zeros":
            return self.normal(name, shape, std) if parameter else np.zeros(shape, np.float32)
        if self.kind == "ones":
            return np.ones(shape, np.float32)
        if self.kind == "small_random":
            return self.normal(name, shape, 0.01)
        return self.normal(name, shape, std)  # random, and extreme where not overridden


# ---- the operators -----------------------------------------------------------------------
# Each builder returns (inputs, args) for one kind; extreme inputs are built here.


def linear_bias(d: Draw):
    # k_proj of a GQA block (Hkv·D = 512 outputs, with bias as in Qwen2): x (B, T, C).
    x = d.floating("x", (B, T, C))
    if d.kind == "extreme":  # outlier ("massive activation") channels
        x[..., [7, 1000, 2047]] = [1000.0, -1000.0, 600.0]
    return [Input("x", x), Input("weight", d.floating("weight", (HKV * D, C), True, C ** -0.5)),
            Input("bias", d.floating("bias", (HKV * D,), True, 0.02))], {}


def linear(d: Draw):
    # down_proj (F → C, no bias): the longest dot product of the block, K = 5472.
    x = d.floating("x", (B, T, F))
    if d.kind == "extreme":
        x[..., [3, 2500, 5471]] = [1000.0, -1000.0, 600.0]
    return [Input("x", x, False), Input("weight", d.floating("weight", (C, F), True, F ** -0.5), False)], {}


def rms_rows(d: Draw, name: str):
    """(B, T, C) with rows of mean square 1e-6, 1e-12, 1e-20 and exactly 0."""
    x = d.normal(name, (B, T, C))
    for t, scale in enumerate((1e-3, 1e-6, 1e-10, 0.0)):
        x[:, t] *= scale
    return x


def rms_norm(d: Draw):
    x = rms_rows(d, "x") if d.kind == "extreme" else d.floating("x", (B, T, C))
    w = d.normal("weight", (C,), 0.1) + 1.0 if d.kind in ("random", "extreme") else d.floating("weight", (C,), True)
    return [Input("x", x), Input("weight", w)], {"eps": RMS_EPS}


def add_rms_norm(d: Draw):
    x = d.floating("x", (B, T, C))
    residual = d.floating("residual", (B, T, C), std=4.0)
    if d.kind == "sequential":
        residual = residual[..., ::-1].copy()  # not equal to x
    if d.kind == "extreme":  # x + residual cancels: to ~1e-6 in rows 0-1, to rounding
        # residue (~1e-8) in row 2 and exactly to zero in row 3
        residual = -x + d.normal("noise", (B, T, C), 1e-6)
        residual[:, 2:] = rms_rows(d, "tiny")[:, 2:] - x[:, 2:]
    w = d.normal("weight", (C,), 0.1) + 1.0 if d.kind in ("random", "extreme") else d.floating("weight", (C,), True)
    return [Input("x", x), Input("residual", residual), Input("weight", w)], {"eps": RMS_EPS}


def silu_gate(d: Draw, name: str):
    """(B, T, F) gates: normal·20 with ±88.7 (exp's overflow), ±1e4 and ±1e-30 planted."""
    x = d.normal(name, (B, T, F), 20.0)
    x[..., :12] = [-1e4, 1e4, -100.0, 100.0, -88.72, -88.73, -89.0, 88.0, -1e-30, 1e-30, -0.0, 0.0]
    return x


def silu(d: Draw):
    x = silu_gate(d, "x") if d.kind == "extreme" else d.floating("x", (B, T, F), std=2.0)
    return [Input("x", x)], {}


def swiglu(d: Draw):
    gate = silu_gate(d, "gate") if d.kind == "extreme" else d.floating("gate", (B, T, F), std=2.0)
    up = d.floating("up", (B, T, F), std=2.0)
    if d.kind == "sequential":
        up = up[..., ::-1].copy()
    return [Input("gate", gate), Input("up", up)], {}


def extreme_logits(d: Draw, name: str):
    """(T, V) rows: uniform ±80; alternating ±80 (ties); 1000 + normal (needs the max
    subtracted: exp(1000) overflows); one +80 among -80s (underflow to exact zeros)."""
    x = np.empty((T, V), np.float32)
    x[0] = d.rng(name).uniform(-80.0, 80.0, V)
    x[1] = np.where(np.arange(V) % 2 == 0, 80.0, -80.0)
    x[2] = 1000.0 + d.normal(name + ".2", (V,))
    x[3] = -80.0
    x[3, 12345] = 80.0
    return x


def softmax(d: Draw):
    # The sampling softmax over a row of logits, (B, T, V).
    x = extreme_logits(d, "x")[None] if d.kind == "extreme" else d.floating("x", (B, T, V), std=3.0)
    return [Input("x", x)], {"dim": -1}


def rope(d: Draw):
    x = d.floating("x", (B, H, T, D))
    positions = {"sequential": [0, 1, 2, 3], "zeros": [0, 0, 0, 0], "ones": [1, 1, 1, 1],
                 "small_random": [5, 17, 300, 2047], "random": [11, 4090, 4091, 70000],
                 "extreme": [0, 32767, 65535, 131071]}[d.kind]
    return [Input("x", x), Input("positions", np.array(positions, np.int64), False)], {"theta": ROPE_THETA}


def attention(d: Draw):
    # Causal GQA self-attention over the T tokens: q (B, H, T, D), k and v (B, Hkv, T, D).
    std = 6.0 if d.kind == "extreme" else 1.0  # scores q·k/sqrt(D) of std ~36
    q, k = d.floating("q", (B, H, T, D), std=std), d.floating("k", (B, HKV, T, D), std=std)
    v = d.floating("v", (B, HKV, T, D))
    if d.kind == "sequential":
        k = k[..., ::-1].copy()
    return [Input("q", q), Input("k", k), Input("v", v)], {"causal": True, "scale": None}


def embedding(d: Draw):
    weight = d.floating("weight", (EMBED_ROWS, C), True)
    ids = {"sequential": np.arange(T * B).reshape(B, T),
           "extreme": np.array([[0, EMBED_ROWS - 1, EMBED_ROWS - 1, 0]])}.get(d.kind)
    if ids is None:
        ids = d.integers("ids", 0, EMBED_ROWS, (B, T))
        ids[0, 3] = ids[0, 1]  # a repeated id: its gradient rows accumulate
    return [Input("weight", weight), Input("ids", ids.astype(np.int64), False)], {}


def cross_entropy(d: Draw):
    # Mean next-token loss over B·T rows of (T, V) logits; row 2 is ignored except in
    # `sequential` (all rows count).
    if d.kind == "extreme":
        logits = extreme_logits(d, "logits")
        targets = np.array([int(np.argmax(logits[0])), 7, IGNORE, 12345])  # 0: max; 1: a -80 of ±80
    else:
        logits = d.floating("logits", (B * T, V), std=3.0)
        targets = d.integers("targets", 0, V, (B * T,))
        if d.kind == "sequential":
            targets = np.arange(B * T)
        else:
            targets[2] = IGNORE
    return [Input("logits", logits), Input("targets", targets.astype(np.int64), False)], {"ignore_index": IGNORE}


@dataclass
class Operator:
    name: str  # folder name
    op: str  # microllm operator (case.json "op")
    build: Callable  # Draw -> (inputs, args)
    backward: bool  # whether the case carries upstream gradients
    what: str  # one line for the report


OPERATORS = {o.name: o for o in [
    Operator("linear_bias", "linear", linear_bias, True, "x·Wᵀ + b, k_proj C→Hkv·D (K=2048)"),
    Operator("linear", "linear", linear, False, "x·Wᵀ, down_proj F→C (K=5472)"),
    Operator("rms_norm", "rms_norm", rms_norm, True, "RMSNorm over C, eps 1e-6 (HF LlamaRMSNorm)"),
    Operator("add_rms_norm", "add_rms_norm", add_rms_norm, True, "fused residual add + RMSNorm vs add then RMSNorm"),
    Operator("silu", "silu", silu, True, "SiLU over F"),
    Operator("swiglu", "swiglu", swiglu, True, "fused SwiGLU vs silu(gate)·up"),
    Operator("softmax", "softmax", softmax, True, "softmax over V"),
    Operator("rope", "rope", rope, True, "RoPE rotate-half, theta 1e6, explicit positions"),
    Operator("attention", "attention", attention, True,
             "causal GQA attention vs repeat_interleave, QKᵀ/sqrt(D), mask, softmax, ·V"),
    Operator("embedding", "embedding", embedding, True, "embedding gather"),
    Operator("cross_entropy", "cross_entropy", cross_entropy, True, "cross-entropy over V, mean, ignore_index -100"),
]}


def upstream_gradient(operator: str, kind: str, name: str, shape) -> np.ndarray:
    """grad_output for an output: normal (one for a scalar loss)."""
    if not shape:
        return np.ones((), np.float32)
    return Draw(operator, kind).normal("grad_output." + name, shape)


def output_shapes(op: Operator, inputs: dict) -> dict:
    """Shapes of the operator's outputs, by name (for the upstream gradients)."""
    first = inputs[next(iter(inputs))].shape
    if op.op == "linear":
        return {"out": inputs["x"].shape[:-1] + inputs["weight"].shape[:1]}
    if op.op == "add_rms_norm":
        return {"out": first, "sum": first}
    if op.op == "embedding":
        return {"out": inputs["ids"].shape + inputs["weight"].shape[1:]}
    if op.op == "cross_entropy":
        return {"out": ()}
    return {"out": first}


def write_case(root: Path, op: Operator, kind: str) -> Path:
    case_dir = root / op.name / kind
    case_dir.mkdir(parents=True, exist_ok=True)
    inputs, args = op.build(Draw(op.name, kind))
    for i in inputs:
        np.save(case_dir / f"{i.name}.npy", i.value)
    values = {i.name: i.value for i in inputs}
    if op.backward:
        for name, shape in output_shapes(op, values).items():
            file = "grad_output.npy" if name == "out" else f"grad_output_{name}.npy"
            np.save(case_dir / file, upstream_gradient(op.name, kind, name, shape))
    spec = {"operator": op.name, "kind": kind, "op": op.op, "dtype": "f32", "args": args,
            "inputs": [{"name": i.name, "requires_grad": op.backward and i.requires_grad} for i in inputs],
            "shapes": {i.name: list(i.value.shape) for i in inputs}}
    (case_dir / "case.json").write_text(json.dumps(spec, indent=1) + "\n")
    return case_dir


def select(ops_arg: str | None) -> list:
    """The operators named in a comma-separated list (all when None); unknown names fail."""
    if not ops_arg:
        return list(OPERATORS.values())
    names = [n.strip() for n in ops_arg.split(",") if n.strip()]
    unknown = [n for n in names if n not in OPERATORS]
    if unknown:
        raise ValueError(f"unknown operator(s) {', '.join(unknown)}; known: {', '.join(OPERATORS)}")
    return [OPERATORS[n] for n in dict.fromkeys(names)]


def generate(root: Path, operators: list) -> list:
    """Writes every case of the operators; returns the case folders."""
    return [write_case(root, op, kind) for op in operators for kind in KINDS]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--output", required=True, type=Path, help="folder to write OUTDIR/<operator>/<kind>/ into")
    parser.add_argument("--ops", help="comma-separated operators (default: all): " + ",".join(OPERATORS))
    args = parser.parse_args()
    try:
        cases = generate(args.output, select(args.ops))
    except ValueError as e:
        print(f"generate.py: error: {e}", file=sys.stderr)
        return 2
    print(f"wrote {len(cases)} cases under {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
