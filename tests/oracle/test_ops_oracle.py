"""PyTorch oracle: every microllm operator's forward and backward against torch autograd.

Each case writes its inputs as .npy files and a case.json into a temporary directory, runs
microllm_op_runner (path in $MICROLLM_OP_RUNNER, see tests/oracle/op_runner.cpp for the
protocol), then compares out.npy and every grad_<input>.npy with PyTorch on the same
inputs and the same random grad_output.

Inputs are drawn in float64 with fixed seeds and cast to the case dtype. Tolerances follow
SPEC §6: F32 |got - ref| <= 1e-5 + 1e-5·|ref| per element; F64 1e-10 + 1e-10·|ref| (F64
catches algorithmic errors that F32 rounding would hide); BF16/F16 relative L2 error
<= 1e-2. Only the realistic-width cases (2048-term dot products, 32000-wide rows) scale
atol by max(1, max|ref|) (`accumulates=True`): there PyTorch's own F32 sum can be off by
more than 1e-5 (measured: the log_softmax backward over 32000 classes reached 1.2x the
plain bound for one seed, with PyTorch 1.35e-5 and microllm 9e-7 away from an F64 truth).
All other cases pass the plain bound with a margin of 3x or more (measured).

Run: MICROLLM_OP_RUNNER=build/tests/microllm_op_runner /usr/bin/python3 -m pytest -q tests/oracle
torch is imported unconditionally: without it the suite fails at collection, never skips.
"""
import itertools
import json
import math
import os
import subprocess
import zlib

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from oracle_support import (BF16, F16, F32, F64, NARROW, T2, TORCH_DTYPE, Case, Inp,
                            assert_close, narrow, permute, positive, randint, randn,
                            run_runner, runner_path, stored_value, to_file)

torch.set_num_threads(1)


# ---- cases -------------------------------------------------------------------------------
CASES = []


def add_case(id, op, inputs, ref, dtype=F32, **kw):
    CASES.append(Case(f"{op}-{id}-{dtype}", op, inputs, ref, dtype=dtype, **kw))


def for_dtypes(fn, dtypes=(F32, F64)):
    for dt in dtypes:
        fn(dt)


# Elementwise binary with broadcasting and non-contiguous operands.
BINARY = {"add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div}
BINARY_SHAPES = [
    ("same", (3, 5, 7), (3, 5, 7), [], []),
    ("bcast", (4, 1, 6), (5, 1), [], []),
    ("bcast_rank", (7,), (3, 4, 7), [], []),
    ("scalar", (2, 3), (), [], []),
    ("both_bcast", (3, 1), (1, 4), [], []),
    ("transposed", (5, 7), (5, 7), [T2], []),
    ("permuted_bcast", (3, 5, 7), (5, 1), [permute(2, 0, 1)], []),
    ("narrowed", (4, 6), (4, 6), [narrow(1, 2, 6)], [narrow(0, 1, 4)]),
]


def _binary(dt):
    for op, fn in BINARY.items():
        for name, sa, sb, va, vb in BINARY_SHAPES:
            b = positive(sb, dt) * torch.where(randn(sb, dt) < 0, -1.0, 1.0).to(TORCH_DTYPE[dt]) \
                if op == "div" else randn(sb, dt)
            add_case(name, op, [Inp("a", randn(sa, dt), view=va), Inp("b", b, view=vb)],
                     lambda t, a, fn=fn: fn(t["a"], t["b"]), dtype=dt)


for_dtypes(_binary)


def _unary(dt):
    x = lambda shape=(4, 9): randn(shape, dt)
    pos = lambda shape=(4, 9): positive(shape, dt)
    specs = [
        ("neg", x, {}, lambda t, a: -t["x"]),
        ("scale", x, {"factor": -2.5}, lambda t, a: t["x"] * a["factor"]),
        ("add_scalar", x, {"value": 0.75}, lambda t, a: t["x"] + a["value"]),
        ("exp", x, {}, lambda t, a: torch.exp(t["x"])),
        ("log", pos, {}, lambda t, a: torch.log(t["x"])),
        ("sqrt", pos, {}, lambda t, a: torch.sqrt(t["x"])),
        ("rsqrt", pos, {}, lambda t, a: torch.rsqrt(t["x"])),
        ("silu", x, {}, lambda t, a: F.silu(t["x"])),
    ]
    for op, gen, args, ref in specs:
        add_case("dense", op, [Inp("x", gen())], ref, args=args, dtype=dt)
        add_case("permuted", op, [Inp("x", gen((3, 4, 5)), view=[permute(1, 2, 0)])], ref,
                 args=args, dtype=dt)
    pow_ref = lambda t, a: torch.pow(t["x"], a["exponent"])
    for e in (2.0, 3.0, 1.0, 0.0):  # integer exponents: any sign of base
        add_case(f"e{e:g}", "pow", [Inp("x", randn((5, 6), dt))], pow_ref,
                 args={"exponent": e}, dtype=dt)
    for e in (0.5, -1.5, 2.5):  # fractional exponents need a positive base
        add_case(f"e{e:g}", "pow", [Inp("x", positive((5, 6), dt), view=[T2])], pow_ref,
                 args={"exponent": e}, dtype=dt)


for_dtypes(_unary)


def _reductions(dt):
    fns = {"sum": lambda x, d, k: x.sum(d, keepdim=k),
           "mean": lambda x, d, k: x.mean(d, keepdim=k),
           "max": lambda x, d, k: x.max(d, keepdim=k).values}
    for op, fn in fns.items():
        for dim, keep in ((0, False), (1, True), (-1, False), (2, True)):
            add_case(f"d{dim}{'k' if keep else ''}", op, [Inp("x", randn((4, 5, 6), dt))],
                     lambda t, a, fn=fn: fn(t["x"], a["dim"], a["keepdim"]),
                     args={"dim": dim, "keepdim": keep}, dtype=dt)
        add_case("permuted", op, [Inp("x", randn((4, 5, 6), dt), view=[permute(2, 0, 1)])],
                 lambda t, a, fn=fn: fn(t["x"], a["dim"], False), args={"dim": 1}, dtype=dt)
    # A long reduction (F32 rounding of a 4096-term sum) and ties for max (first wins).
    for op in ("sum", "mean"):
        add_case("long", op, [Inp("x", randn((3, 4096), dt))],
                 lambda t, a, op=op: fns[op](t["x"], -1, False), args={"dim": -1}, dtype=dt)
    ties = torch.tensor([[1.0, 3.0, 3.0, 2.0], [5.0, 5.0, 5.0, 5.0], [0.0, -1.0, 0.0, 0.0]],
                        dtype=TORCH_DTYPE[dt])
    add_case("ties", "max", [Inp("x", ties)], lambda t, a: t["x"].max(1).values,
             args={"dim": 1}, dtype=dt)
    for dim, keep in ((0, False), (-1, True)):
        add_case(f"d{dim}{'k' if keep else ''}", "argmax", [Inp("x", randn((4, 5, 6), dt), grad=False)],
                 lambda t, a: t["x"].argmax(a["dim"], keepdim=a["keepdim"]),
                 args={"dim": dim, "keepdim": keep}, dtype=dt, exact=True)
    add_case("ties", "argmax", [Inp("x", ties, grad=False)], lambda t, a: t["x"].argmax(1),
             args={"dim": 1}, dtype=dt, exact=True)
    add_case("permuted", "argmax", [Inp("x", randn((4, 5, 6), dt), grad=False, view=[T2])],
             lambda t, a: t["x"].argmax(1), args={"dim": 1}, dtype=dt, exact=True)
    for op, fn in (("sum_all", torch.sum), ("mean_all", torch.mean)):
        add_case("dense", op, [Inp("x", randn((6, 7, 8), dt))], lambda t, a, fn=fn: fn(t["x"]),
                 dtype=dt)
        add_case("narrowed", op, [Inp("x", randn((6, 7), dt), view=[narrow(0, 2, 6)])],
                 lambda t, a, fn=fn: fn(t["x"]), dtype=dt)


for_dtypes(_reductions)


def _matmul_ref(t, a):
    x = t["a"].transpose(-1, -2) if a["trans_a"] else t["a"]
    y = t["b"].transpose(-1, -2) if a["trans_b"] else t["b"]
    return torch.matmul(x, y)


def _matmul(dt):
    M, K, N = 7, 13, 5
    for ta, tb in itertools.product((False, True), repeat=2):
        tag = f"{'T' if ta else 'N'}{'T' if tb else 'N'}"
        args = {"trans_a": ta, "trans_b": tb}
        a_shape = lambda batch=(): (*batch, *((K, M) if ta else (M, K)))
        b_shape = lambda batch=(): (*batch, *((N, K) if tb else (K, N)))
        add_case(tag, "matmul", [Inp("a", randn(a_shape(), dt)), Inp("b", randn(b_shape(), dt))],
                 _matmul_ref, args=args, dtype=dt)
        add_case(f"batched_{tag}", "matmul",
                 [Inp("a", randn(a_shape((3,)), dt)), Inp("b", randn(b_shape((3,)), dt))],
                 _matmul_ref, args=args, dtype=dt)
        # Shared 2-D operand, and the other operand a transposed (non-contiguous) view.
        add_case(f"shared_b_{tag}", "matmul",
                 [Inp("a", randn(a_shape((2,)), dt), view=[T2]), Inp("b", randn(b_shape(), dt))],
                 _matmul_ref, args=args, dtype=dt)
        add_case(f"shared_a_{tag}", "matmul",
                 [Inp("a", randn(a_shape(), dt)), Inp("b", randn(b_shape((4,)), dt), view=[T2])],
                 _matmul_ref, args=args, dtype=dt)
    add_case("large_k", "matmul", [Inp("a", randn((9, 512), dt)), Inp("b", randn((512, 11), dt))],
             _matmul_ref, args={"trans_a": False, "trans_b": False}, dtype=dt)
    add_case("permuted_batch", "matmul",
             [Inp("a", randn((2, 6, 5), dt), view=[permute(1, 0, 2)]), Inp("b", randn((2, 5, 4), dt))],
             _matmul_ref, args={"trans_a": False, "trans_b": False}, dtype=dt)


for_dtypes(_matmul)


def _linear(dt):
    ref = lambda t, a: F.linear(t["x"], t["weight"], t.get("bias"))
    B, T, C, O = 2, 5, 16, 12
    add_case("bias_BTC", "linear", [Inp("x", randn((B, T, C), dt)), Inp("weight", randn((O, C), dt)),
                                    Inp("bias", randn((O,), dt))], ref, dtype=dt)
    add_case("nobias_BTC", "linear", [Inp("x", randn((B, T, C), dt)), Inp("weight", randn((O, C), dt))],
             ref, dtype=dt)
    add_case("bias_2d", "linear", [Inp("x", randn((7, C), dt)), Inp("weight", randn((O, C), dt)),
                                   Inp("bias", randn((O,), dt))], ref, dtype=dt)
    # x as a (B, T, C) view of a (T, B, C) buffer, weight a transposed (in, out) buffer.
    add_case("views", "linear", [Inp("x", randn((B, T, C), dt), view=[permute(1, 0, 2)]),
                                 Inp("weight", randn((O, C), dt), view=[T2]),
                                 Inp("bias", randn((O,), dt))], ref, dtype=dt)


for_dtypes(_linear)


def _softmax(dt):
    for op, fn in (("softmax", torch.softmax), ("log_softmax", torch.log_softmax)):
        ref = lambda t, a, fn=fn: fn(t["x"], a["dim"])
        for dim in (-1, 0, 1):
            add_case(f"d{dim}", op, [Inp("x", randn((3, 4, 9), dt))], ref, args={"dim": dim}, dtype=dt)
        # Large logits: stability needs the max subtracted first.
        add_case("large", op, [Inp("x", randn((4, 33), dt, scale=40.0))], ref, args={"dim": -1},
                 dtype=dt)
        add_case("permuted", op, [Inp("x", randn((3, 4, 9), dt), view=[permute(2, 0, 1)])], ref,
                 args={"dim": -1}, dtype=dt)


for_dtypes(_softmax)


def _hf_rms_norm(x, weight, eps):
    """Hugging Face LlamaRMSNorm: statistics in float32 (float64 stays float64)."""
    h = x.float() if x.dtype != torch.float64 else x
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return weight * h.to(x.dtype)


def _norms(dt):
    ref = lambda t, a: _hf_rms_norm(t["x"], t["weight"], a["eps"])
    add_case("BTC", "rms_norm", [Inp("x", randn((2, 5, 32), dt)), Inp("weight", randn((32,), dt))],
             ref, args={"eps": 1e-6}, dtype=dt)
    add_case("permuted_eps1e-5", "rms_norm",
             [Inp("x", randn((3, 4, 64), dt), view=[permute(1, 0, 2)]), Inp("weight", randn((64,), dt))],
             ref, args={"eps": 1e-5}, dtype=dt)
    add_case("small_values", "rms_norm",
             [Inp("x", randn((6, 16), dt, scale=1e-3)), Inp("weight", randn((16,), dt))],
             ref, args={"eps": 1e-6}, dtype=dt)

    def add_ref(t, a):
        s = t["x"] + t["residual"]
        return {"out": _hf_rms_norm(s, t["weight"], a["eps"]), "sum": s}

    add_case("BTC", "add_rms_norm", [Inp("x", randn((2, 5, 32), dt)), Inp("residual", randn((2, 5, 32), dt)),
                                     Inp("weight", randn((32,), dt))],
             add_ref, args={"eps": 1e-6}, dtype=dt)
    add_case("views", "add_rms_norm",
             [Inp("x", randn((4, 24), dt), view=[narrow(1, 1, 24)]), Inp("residual", randn((4, 24), dt)),
              Inp("weight", randn((24,), dt))], add_ref, args={"eps": 1e-5}, dtype=dt)


for_dtypes(_norms)


def _swiglu(dt):
    ref = lambda t, a: F.silu(t["gate"]) * t["up"]
    add_case("BTF", "swiglu", [Inp("gate", randn((2, 3, 40), dt)), Inp("up", randn((2, 3, 40), dt))], ref, dtype=dt)
    add_case("views", "swiglu", [Inp("gate", randn((5, 8), dt), view=[T2]),
                                 Inp("up", randn((5, 8), dt), view=[narrow(0, 2, 5)])], ref, dtype=dt)


for_dtypes(_swiglu)


def _hf_inv_freq(D, theta, dtype=torch.float32):
    """Hugging Face _compute_default_rope_parameters: float32 unless asked otherwise."""
    return 1.0 / (theta ** (torch.arange(0, D, 2, dtype=torch.int64).to(dtype) / D))


def _hf_rope(x, positions, inv_freq):
    """Hugging Face LlamaRotaryEmbedding + apply_rotary_pos_emb (rotate_half)."""
    pos = positions if positions.dim() == 2 else positions[None]  # (B or 1, T)
    freqs = pos.to(inv_freq.dtype)[..., None] * inv_freq  # (B, T, D/2)
    emb = torch.cat((freqs, freqs), dim=-1)  # (B, T, D)
    cos, sin = emb.cos()[:, None].to(x.dtype), emb.sin()[:, None].to(x.dtype)  # (B, 1, T, D)
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


def _rope(dt):
    def ref(t, a):
        inv = t["inv_freq"] if "inv_freq" in t else _hf_inv_freq(t["x"].shape[-1], a["theta"])
        return _hf_rope(t["x"], t["positions"], inv)

    B, H, T, D = 2, 3, 7, 16
    pos_cases = [
        ("from0", torch.arange(T)),
        ("offset5", torch.arange(5, 5 + T)),
        ("offset4090", torch.arange(4090, 4090 + T)),
        ("per_batch", torch.stack([torch.arange(3, 3 + T), torch.arange(100, 100 + T)])),
        ("scattered_i32", torch.tensor([0, 9, 2, 31, 7, 500, 64], dtype=torch.int32)),
    ]
    for theta in (1e4, 1e6):
        for name, pos in pos_cases:
            inputs = [Inp("x", randn((B, H, T, D), dt)), Inp("positions", pos, grad=False)]
            if dt == F64:  # F64 frequencies, so the whole reference runs in F64
                inputs.append(Inp("inv_freq", _hf_inv_freq(D, theta, torch.float64), grad=False))
            add_case(f"theta{theta:g}_{name}", "rope", inputs, ref, args={"theta": theta}, dtype=dt)
    # q as Hugging Face lays it out: a (B, T, H, D) projection seen as (B, H, T, D).
    inputs = [Inp("x", randn((B, H, T, 64), dt), view=[permute(0, 2, 1, 3)]),
              Inp("positions", torch.arange(11, 11 + T), grad=False)]
    if dt == F64:
        inputs.append(Inp("inv_freq", _hf_inv_freq(64, 1e6, torch.float64), grad=False))
    add_case("permuted_D64", "rope", inputs, ref, args={"theta": 1e6}, dtype=dt)
    # Scaled frequencies come from the model config as an input ("linear" scaling, factor 8).
    inv_freq = _hf_inv_freq(32, 5e5, TORCH_DTYPE[dt]) / 8
    add_case("given_inv_freq", "rope", [Inp("x", randn((1, 2, 5, 32), dt)),
                                        Inp("positions", torch.arange(1000, 1005), grad=False),
                                        Inp("inv_freq", inv_freq, grad=False)], ref, dtype=dt)


for_dtypes(_rope)

for D in (16, 64, 128):
    for theta in (1e4, 5e5, 1e6):
        add_case(f"D{D}_theta{theta:g}", "rope_inv_freq", [],
                 lambda t, a: _hf_inv_freq(a["head_dim"], a["theta"]),
                 args={"head_dim": D, "theta": theta})


def _embedding(dt):
    ref = lambda t, a: F.embedding(t["ids"].long(), t["weight"])
    ids = torch.tensor([[3, 1, 3, 0], [10, 3, 3, 1]])  # repeats: the gradient accumulates
    add_case("repeats_i64", "embedding", [Inp("weight", randn((11, 8), dt)), Inp("ids", ids, grad=False)],
             ref, dtype=dt)
    add_case("repeats_i32", "embedding",
             [Inp("weight", randn((11, 8), dt)), Inp("ids", ids.to(torch.int32), grad=False)],
             ref, dtype=dt)
    add_case("1d_transposed_weight", "embedding",
             [Inp("weight", randn((9, 6), dt), view=[T2]), Inp("ids", randint(0, 9, (13,)), grad=False)],
             ref, dtype=dt)


for_dtypes(_embedding)


def _cross_entropy(dt):
    def ref(t, a):
        return F.cross_entropy(t["logits"], t["targets"].long(), ignore_index=a["ignore_index"])

    targets = torch.tensor([2, -100, 12, 0, 5, -100, 7, 1, 12])  # rows 1 and 5 ignored
    add_case("ignored_rows", "cross_entropy",
             [Inp("logits", randn((9, 13), dt)), Inp("targets", targets, grad=False)],
             ref, args={"ignore_index": -100}, dtype=dt)
    add_case("ignore_index3_i32", "cross_entropy",
             [Inp("logits", randn((6, 5), dt)),
              Inp("targets", torch.tensor([3, 0, 3, 4, 1, 3], dtype=torch.int32), grad=False)],
             ref, args={"ignore_index": 3}, dtype=dt)
    add_case("large_vocab", "cross_entropy",
             [Inp("logits", randn((6, 1000), dt, scale=3.0)), Inp("targets", randint(0, 1000, (6,)), grad=False)],
             ref, args={"ignore_index": -100}, dtype=dt)
    add_case("transposed_logits", "cross_entropy",
             [Inp("logits", randn((5, 7), dt), view=[T2]), Inp("targets", randint(0, 7, (5,)), grad=False)],
             ref, args={"ignore_index": -100}, dtype=dt)
    # Every row ignored: microllm documents loss 0 and a zero gradient (PyTorch gives NaN).
    add_case("all_ignored", "cross_entropy",
             [Inp("logits", randn((3, 4), dt)), Inp("targets", torch.full((3,), -100), grad=False)],
             ref, args={"ignore_index": -100}, dtype=dt,
             expect=lambda t, a: (t["logits"] * 0).sum())


for_dtypes(_cross_entropy)


def _attention_ref(t, a):
    """Explicit reference: S = Q·Kᵀ·scale, causal mask by position, softmax in F32 (F64 for
    F64), ·V; query head h reads KV head h // (H / Hkv) (repeat_interleave)."""
    q, k, v = t["q"], t["k"], t["v"]
    H, T, D = q.shape[1], q.shape[2], q.shape[3]
    Hkv, S = k.shape[1], k.shape[2]
    k = k.repeat_interleave(H // Hkv, dim=1)
    v = v.repeat_interleave(H // Hkv, dim=1)
    scale = a["scale"] if a.get("scale") is not None else 1.0 / math.sqrt(D)
    scores = torch.matmul(q, k.transpose(-1, -2)) * scale  # (B, H, T, S)
    if a["causal"]:
        q_pos = t["q_positions"].long() if "q_positions" in t else torch.arange(S - T, S)
        k_pos = t["k_positions"].long() if "k_positions" in t else torch.arange(S)
        scores = scores.masked_fill(k_pos[None, :] > q_pos[:, None], float("-inf"))
    compute = torch.float64 if q.dtype == torch.float64 else torch.float32
    probs = torch.softmax(scores.to(compute), dim=-1).to(q.dtype)
    return torch.matmul(probs, v)


def _attention(dt):
    def qkv(B, H, Hkv, T, S, D, q_view=(), kv_view=()):
        return [Inp("q", randn((B, H, T, D), dt), view=list(q_view)),
                Inp("k", randn((B, Hkv, S, D), dt), view=list(kv_view)),
                Inp("v", randn((B, Hkv, S, D), dt), view=list(kv_view))]

    causal = {"causal": True, "scale": None}
    # Qwen-like GQA: 14 query heads share 2 KV heads, head dim 64.
    for T in (16, 33):
        add_case(f"gqa14x2_T{T}", "attention", qkv(1, 14, 2, T, T, 64), _attention_ref,
                 args=causal, dtype=dt)
    add_case("gqa14x2_B2_T19", "attention", qkv(2, 14, 2, 19, 19, 64), _attention_ref,
             args=causal, dtype=dt)
    # Decode-like: T < S, queries are the last T positions by default.
    add_case("decode_T1_S20", "attention", qkv(1, 14, 2, 1, 20, 64), _attention_ref,
             args=causal, dtype=dt)
    add_case("chunk_T5_S21", "attention", qkv(2, 4, 2, 5, 21, 32), _attention_ref,
             args=causal, dtype=dt)
    # Explicit positions (packed/chunked prefill): queries at 7..12 over keys 3..22.
    add_case("positions", "attention",
             qkv(2, 6, 3, 6, 20, 16) + [Inp("q_positions", torch.arange(7, 13), grad=False),
                                        Inp("k_positions", torch.arange(3, 23), grad=False)],
             _attention_ref, args=causal, dtype=dt)
    add_case("positions_i32_unsorted", "attention",
             qkv(1, 2, 1, 4, 6, 8) + [
                 Inp("q_positions", torch.tensor([5, 2, 9, 3], dtype=torch.int32), grad=False),
                 Inp("k_positions", torch.tensor([0, 4, 1, 8, 2, 3], dtype=torch.int32), grad=False)],
             _attention_ref, args=causal, dtype=dt)
    add_case("noncausal_scale0.3", "attention", qkv(2, 4, 4, 9, 12, 16), _attention_ref,
             args={"causal": False, "scale": 0.3}, dtype=dt)
    # Q, K, V as Hugging Face lays them out: (B, T, heads, D) seen as (B, heads, T, D).
    add_case("hf_layout_views", "attention",
             qkv(2, 14, 2, 17, 17, 64, q_view=[permute(0, 2, 1, 3)], kv_view=[permute(0, 2, 1, 3)]),
             _attention_ref, args=causal, dtype=dt)


for_dtypes(_attention)


def _structural(dt):
    cast_to = {F32: ("f64", "f16", "bf16", "i32", "i64"), F64: ("f32", "bf16")}[dt]
    torch_to = {"f64": torch.float64, "f32": torch.float32, "f16": torch.float16,
                "bf16": torch.bfloat16, "i32": torch.int32, "i64": torch.int64}
    for to in cast_to:
        floating = to[0] in "fb"
        x = randn((4, 7), dt, scale=3.0)
        add_case(f"to_{to}", "cast", [Inp("x", x, grad=floating)],
                 lambda t, a: t["x"].to(torch_to[a["to"]]), args={"to": to}, dtype=dt, exact=True)
    add_case("to_f32_transposed", "cast", [Inp("x", randn((4, 7), dt), view=[T2])],
             lambda t, a: t["x"].to(torch.float32), args={"to": "f32"}, dtype=dt, exact=True)

    cat_ref = lambda t, a: torch.cat([t[n] for n in ("p0", "p1", "p2")], a["dim"])
    for dim, shapes in ((1, [(2, 3, 4), (2, 5, 4), (2, 1, 4)]), (0, [(1, 6), (4, 6), (2, 6)]),
                        (-1, [(3, 2), (3, 5), (3, 1)])):
        add_case(f"d{dim}", "concat", [Inp(f"p{i}", randn(s, dt)) for i, s in enumerate(shapes)],
                 cat_ref, args={"dim": dim}, dtype=dt, exact=True)
    add_case("views", "concat", [Inp("p0", randn((3, 4), dt), view=[T2]), Inp("p1", randn((3, 2), dt)),
                                 Inp("p2", randn((3, 3), dt), view=[narrow(1, 1, 3)])],
             cat_ref, args={"dim": 1}, dtype=dt, exact=True)

    sel_ref = lambda t, a: torch.index_select(t["x"], a["dim"], t["index"].long())
    add_case("d0_repeats", "index_select",
             [Inp("x", randn((6, 5), dt)), Inp("index", torch.tensor([1, 4, 1, 0, 5, 1]), grad=False)],
             sel_ref, args={"dim": 0}, dtype=dt)
    add_case("d1_i32", "index_select",
             [Inp("x", randn((4, 6), dt)), Inp("index", torch.tensor([5, 0, 5], dtype=torch.int32), grad=False)],
             sel_ref, args={"dim": 1}, dtype=dt)
    add_case("dlast_permuted", "index_select",
             [Inp("x", randn((3, 4, 5), dt), view=[permute(2, 0, 1)]),
              Inp("index", torch.tensor([3, 3, 2, 0]), grad=False)],
             sel_ref, args={"dim": -1}, dtype=dt)


for_dtypes(_structural)


def _views(dt):
    specs = [
        ("reshape", "split", (4, 6), [], {"shape": [2, 2, 3, 2]}, lambda x, a: x.reshape(a["shape"])),
        ("reshape", "infer", (4, 6), [], {"shape": [3, -1]}, lambda x, a: x.reshape(a["shape"])),
        ("reshape", "copy_of_transposed", (4, 6), [T2], {"shape": [24]}, lambda x, a: x.reshape(a["shape"])),
        ("view", "merge", (2, 3, 4), [], {"shape": [6, 4]}, lambda x, a: x.view(a["shape"])),
        ("permute", "3d", (2, 3, 4), [], {"dims": [2, 0, 1]}, lambda x, a: x.permute(a["dims"])),
        ("transpose", "neg_dims", (2, 3, 4), [], {"dim0": -1, "dim1": 0}, lambda x, a: x.transpose(a["dim0"], a["dim1"])),
        ("narrow", "middle", (5, 6), [], {"dim": 1, "start": 2, "length": 3},
         lambda x, a: x.narrow(a["dim"], a["start"], a["length"])),
        ("narrow", "of_transposed", (5, 6), [T2], {"dim": 0, "start": 1, "length": 4},
         lambda x, a: x.narrow(a["dim"], a["start"], a["length"])),
        ("slice", "end", (7, 3), [], {"dim": 0, "start": 4, "end": 7}, lambda x, a: x[a["start"]:a["end"]]),
        ("expand", "row", (1, 3), [], {"shape": [4, 3]}, lambda x, a: x.expand(a["shape"])),
        ("expand", "new_leading", (3, 1), [], {"shape": [2, 3, 5]}, lambda x, a: x.expand(a["shape"])),
        ("squeeze", "d1", (3, 1, 4), [], {"dim": 1}, lambda x, a: x.squeeze(a["dim"])),
        ("unsqueeze", "neg", (3, 4), [], {"dim": -1}, lambda x, a: x.unsqueeze(a["dim"])),
        ("unsqueeze", "front", (3, 4), [], {"dim": 0}, lambda x, a: x.unsqueeze(a["dim"])),
        ("flatten", "middle", (2, 3, 4, 5), [], {"start_dim": 1, "end_dim": 2},
         lambda x, a: x.flatten(a["start_dim"], a["end_dim"])),
        ("contiguous", "of_permuted", (2, 3, 4), [permute(1, 2, 0)], {}, lambda x, a: x.contiguous()),
    ]
    for op, name, shape, view, args, fn in specs:
        add_case(name, op, [Inp("x", randn(shape, dt), view=view)], lambda t, a, fn=fn: fn(t["x"], a),
                 args=args, dtype=dt, exact=op != "expand")  # expand's backward sums: not exact


for_dtypes(_views)


# Realistic widths (SPEC §4.12: hidden 2048, 32 heads, 4 KV heads, head dim 128, FFN 5472,
# a 32000 vocabulary), F32. Sums of 2048 products have F32 rounding errors that grow with
# the sum's magnitude, so these cases scale atol by max|ref| (accumulates=True).
def _realistic():
    add_case("hidden2048", "linear", [Inp("x", randn((1, 16, 2048))), Inp("weight", randn((96, 2048))),
                                      Inp("bias", randn((96,)))],
             lambda t, a: F.linear(t["x"], t["weight"], t["bias"]), accumulates=True)
    add_case("gqa32x4_D128", "attention", [Inp("q", randn((1, 32, 48, 128))), Inp("k", randn((1, 4, 48, 128))),
                                           Inp("v", randn((1, 4, 48, 128)))], _attention_ref,
             args={"causal": True, "scale": None}, accumulates=True)
    add_case("hidden2048", "rms_norm", [Inp("x", randn((4, 2048))), Inp("weight", randn((2048,)))],
             lambda t, a: _hf_rms_norm(t["x"], t["weight"], a["eps"]), args={"eps": 1e-6}, accumulates=True)
    add_case("ffn5472", "swiglu", [Inp("gate", randn((8, 5472))), Inp("up", randn((8, 5472)))],
             lambda t, a: F.silu(t["gate"]) * t["up"])
    add_case("vocab32000", "cross_entropy", [Inp("logits", randn((8, 32000), scale=2.0)),
                                             Inp("targets", randint(0, 32000, (8,)), grad=False)],
             lambda t, a: F.cross_entropy(t["logits"], t["targets"]), args={"ignore_index": -100},
             accumulates=True)
    add_case("vocab32000", "log_softmax", [Inp("x", randn((4, 32000), scale=2.0))],
             lambda t, a: torch.log_softmax(t["x"], -1), args={"dim": -1}, accumulates=True)


_realistic()


# BF16 and F16 inputs: microllm computes in F32 and rounds once; judged by relative L2
# (SPEC §6, <= 1e-2) against the F32 PyTorch result on the same representable inputs.
def _narrow(dt):
    add_case("dense", "add", [Inp("a", randn((4, 8), dt)), Inp("b", randn((8,), dt))],
             lambda t, a: t["a"] + t["b"], dtype=dt)
    add_case("dense", "silu", [Inp("x", randn((4, 8), dt))], lambda t, a: F.silu(t["x"]), dtype=dt)
    add_case("NT", "matmul", [Inp("a", randn((6, 32), dt)), Inp("b", randn((5, 32), dt))], _matmul_ref,
             args={"trans_a": False, "trans_b": True}, dtype=dt)
    add_case("BTC", "rms_norm", [Inp("x", randn((2, 3, 32), dt)), Inp("weight", randn((32,), dt))],
             lambda t, a: _hf_rms_norm(t["x"], t["weight"], a["eps"]), args={"eps": 1e-6}, dtype=dt)
    add_case("d-1", "softmax", [Inp("x", randn((3, 17), dt))], lambda t, a: torch.softmax(t["x"], -1),
             args={"dim": -1}, dtype=dt)
    add_case("gqa", "attention", [Inp("q", randn((1, 4, 9, 32), dt)), Inp("k", randn((1, 2, 9, 32), dt)),
                                  Inp("v", randn((1, 2, 9, 32), dt))], _attention_ref,
             args={"causal": True, "scale": None}, dtype=dt)
    add_case("ids", "embedding", [Inp("weight", randn((7, 8), dt)), Inp("ids", torch.tensor([1, 6, 1]), grad=False)],
             lambda t, a: F.embedding(t["ids"], t["weight"]), dtype=dt)


for_dtypes(_narrow, (BF16, F16))
# From BF16: exact, and the gradient is rounded to BF16 on the way back as in PyTorch.
add_case("from_bf16", "cast", [Inp("x", randn((3, 5), BF16))],
         lambda t, a: t["x"].to(torch.bfloat16).to(torch.float32), args={"to": "f32"}, dtype=BF16, exact=True)


# ---- tests -------------------------------------------------------------------------------
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_op(case, tmp_path):
    # Write the inputs as the runner will load them, and the case description.
    for inp in case.inputs:
        np.save(tmp_path / f"{inp.name}.npy", to_file(stored_value(inp.value, inp.view)))
    spec = {"op": case.op, "dtype": case.dtype, "args": case.args,
            "inputs": [{"name": i.name, "requires_grad": i.grad, "view": i.view} for i in case.inputs]}

    # PyTorch forward on leaves holding the logical values.
    leaves = {i.name: i.value.clone().requires_grad_(i.grad) for i in case.inputs}
    out = (case.expect or case.ref)(leaves, case.args)
    outs = out if isinstance(out, dict) else {"out": out}
    wants_grad = [n for n, i in zip(leaves, case.inputs) if i.grad]
    grad_outputs = {}
    if wants_grad:
        gen = torch.Generator().manual_seed(zlib.crc32(case.id.encode()))  # per case: order-free
        for name, o in outs.items():
            g = torch.randn(tuple(o.shape), generator=gen, dtype=torch.float64).to(o.dtype)
            if case.dtype in NARROW:  # the runner casts grads to the narrow type
                g = g.to(torch.bfloat16 if case.dtype == BF16 else torch.float16).to(o.dtype)
            grad_outputs[name] = g
            np.save(tmp_path / ("grad_output.npy" if name == "out" else f"grad_output_{name}.npy"), to_file(g))
    (tmp_path / "case.json").write_text(json.dumps(spec))

    result = run_runner(tmp_path)
    assert result.returncode == 0, f"runner failed ({result.returncode}): {result.stderr.strip()}"

    for name, o in outs.items():
        assert_close(f"{case.id} forward '{name}'", np.load(tmp_path / f"{name}.npy"), o, case)
    if not wants_grad:
        return
    grads = torch.autograd.grad([outs[n] for n in grad_outputs], [leaves[n] for n in wants_grad],
                                [grad_outputs[n] for n in grad_outputs], allow_unused=True)
    for name, g in zip(wants_grad, grads):
        g = torch.zeros_like(leaves[name]) if g is None else g
        assert_close(f"{case.id} grad '{name}'", np.load(tmp_path / f"grad_{name}.npy"), g, case)


def test_every_op_is_covered():
    """Each operator in the runner's dispatch table has at least one oracle case."""
    listed = subprocess.run([runner_path(), "--list-ops"], capture_output=True, text=True, check=True)
    runner_ops = set(listed.stdout.split())
    assert runner_ops, "the runner lists no operators"
    covered = {c.op for c in CASES}
    assert runner_ops - covered == set(), f"operators without an oracle case: {sorted(runner_ops - covered)}"
    assert covered - runner_ops == set(), f"cases for unknown operators: {sorted(covered - runner_ops)}"


def test_runner_reports_errors(tmp_path):
    """Bad inputs: a message on stderr and exit code 1 (shape mismatch, unknown op, bad file)."""
    np.save(tmp_path / "a.npy", np.zeros((2, 3), np.float32))
    np.save(tmp_path / "b.npy", np.zeros((4, 5), np.float32))
    (tmp_path / "case.json").write_text(json.dumps(
        {"op": "add", "inputs": [{"name": "a"}, {"name": "b"}]}))
    result = run_runner(tmp_path)
    assert result.returncode == 1 and "add" in result.stderr and "(2, 3)" in result.stderr, result.stderr

    (tmp_path / "case.json").write_text(json.dumps({"op": "no_such_op", "inputs": []}))
    result = run_runner(tmp_path)
    assert result.returncode == 1 and "unknown op 'no_such_op'" in result.stderr, result.stderr

    (tmp_path / "a.npy").write_bytes((tmp_path / "b.npy").read_bytes()[:-5])  # truncated data
    (tmp_path / "case.json").write_text(json.dumps({"op": "neg", "inputs": [{"name": "x"}]}))
    os.replace(tmp_path / "a.npy", tmp_path / "x.npy")
    result = run_runner(tmp_path)
    assert result.returncode == 1 and "x.npy" in result.stderr and "truncated" in result.stderr, result.stderr


def test_npy_interop(tmp_path):
    """Files microllm writes load in NumPy unchanged, for every dtype NumPy shares."""
    for dtype in (np.float64, np.float32, np.float16, np.int64, np.int32, np.int8, np.uint8, np.bool_):
        value = (np.arange(-6, 18).reshape(2, 3, 4) % 7).astype(dtype)
        np.save(tmp_path / "x.npy", value)
        (tmp_path / "case.json").write_text(json.dumps(
            {"op": "permute", "args": {"dims": [2, 0, 1]}, "inputs": [{"name": "x"}]}))
        result = run_runner(tmp_path)
        assert result.returncode == 0, result.stderr
        back = np.load(tmp_path / "out.npy")
        assert back.dtype == value.dtype and np.array_equal(back, value.transpose(2, 0, 1)), dtype
    # Fortran-ordered input is read correctly.
    value = np.asfortranarray(np.arange(12, dtype=np.float32).reshape(3, 4))
    np.save(tmp_path / "x.npy", value)
    (tmp_path / "case.json").write_text(json.dumps({"op": "contiguous", "inputs": [{"name": "x"}]}))
    assert run_runner(tmp_path).returncode == 0
    assert np.array_equal(np.load(tmp_path / "out.npy"), value)
