"""PyTorch oracle for silu and swiglu: forward output and every input gradient against torch
autograd through microllm_op_runner (protocol, seeds and SPEC §6 tolerances:
tests/oracle/oracle_support.py).
"""
import pytest
import torch
import torch.nn.functional as F

from oracle_support import (BF16, F16, T2, Cases, Inp, for_dtypes, narrow, permute, randn,
                            restart_seeds, run_case)

restart_seeds()
CASES = Cases()
add_case = CASES.add


def _unary(dt):
    x = lambda shape=(4, 9): randn(shape, dt)
    specs = [
        ("silu", x, {}, lambda t, a: F.silu(t["x"])),
    ]
    for op, gen, args, ref in specs:
        add_case("dense", op, [Inp("x", gen())], ref, args=args, dtype=dt)
        add_case("permuted", op, [Inp("x", gen((3, 4, 5)), view=[permute(1, 2, 0)])], ref,
                 args=args, dtype=dt)


for_dtypes(_unary)


def _swiglu(dt):
    ref = lambda t, a: F.silu(t["gate"]) * t["up"]
    add_case("BTF", "swiglu", [Inp("gate", randn((2, 3, 40), dt)), Inp("up", randn((2, 3, 40), dt))], ref, dtype=dt)
    add_case("views", "swiglu", [Inp("gate", randn((5, 8), dt), view=[T2]),
                                 Inp("up", randn((5, 8), dt), view=[narrow(0, 2, 5)])], ref, dtype=dt)


for_dtypes(_swiglu)


# Realistic width (SPEC §4.12: hidden 2048, 32 heads, 4 KV heads, head dim 128, FFN 5472,
# a 32000 vocabulary), F32. Sums of 2048 products have F32 rounding errors that grow with
# the sum's magnitude, so such cases scale atol by max|ref| (accumulates=True).
def _realistic():
    add_case("ffn5472", "swiglu", [Inp("gate", randn((8, 5472))), Inp("up", randn((8, 5472)))],
             lambda t, a: F.silu(t["gate"]) * t["up"])


_realistic()


# BF16 and F16 inputs: microllm computes in F32 and rounds once; judged by relative L2
# (SPEC §6, <= 1e-2) against the F32 PyTorch result on the same representable inputs.
def _narrow(dt):
    add_case("dense", "silu", [Inp("x", randn((4, 8), dt))], lambda t, a: F.silu(t["x"]), dtype=dt)


for_dtypes(_narrow, (BF16, F16))


# ---- tests -------------------------------------------------------------------------------
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_op(case, tmp_path):
    run_case(case, tmp_path)
