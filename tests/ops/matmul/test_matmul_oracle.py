"""PyTorch oracle for matmul (every transpose, batched, shared and non-contiguous operands) and
linear: forward output and every input gradient against torch autograd through
microllm_op_runner (protocol, seeds and SPEC §6 tolerances: tests/oracle/oracle_support.py).
"""
import itertools

import pytest
import torch
import torch.nn.functional as F

from oracle_support import (BF16, F16, T2, Cases, Inp, for_dtypes, permute, randn, restart_seeds,
                            run_case)

restart_seeds()
CASES = Cases()
add_case = CASES.add


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


# Realistic width (SPEC §4.12: hidden 2048, 32 heads, 4 KV heads, head dim 128, FFN 5472,
# a 32000 vocabulary), F32. Sums of 2048 products have F32 rounding errors that grow with
# the sum's magnitude, so such cases scale atol by max|ref| (accumulates=True).
def _realistic():
    add_case("hidden2048", "linear", [Inp("x", randn((1, 16, 2048))), Inp("weight", randn((96, 2048))),
                                      Inp("bias", randn((96,)))],
             lambda t, a: F.linear(t["x"], t["weight"], t["bias"]), accumulates=True)


_realistic()


# BF16 and F16 inputs: microllm computes in F32 and rounds once; judged by relative L2
# (SPEC §6, <= 1e-2) against the F32 PyTorch result on the same representable inputs.
def _narrow(dt):
    add_case("NT", "matmul", [Inp("a", randn((6, 32), dt)), Inp("b", randn((5, 32), dt))], _matmul_ref,
             args={"trans_a": False, "trans_b": True}, dtype=dt)


for_dtypes(_narrow, (BF16, F16))


# ---- tests -------------------------------------------------------------------------------
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_op(case, tmp_path):
    run_case(case, tmp_path)
