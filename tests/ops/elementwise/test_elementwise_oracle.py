"""PyTorch oracle for the elementwise operators (add, sub, mul, div with broadcasting and
non-contiguous operands; neg, scale, add_scalar, exp, log, sqrt, rsqrt, pow): forward output
and every input gradient against torch autograd through microllm_op_runner (protocol, seeds
and SPEC §6 tolerances: tests/oracle/oracle_support.py).
"""
import pytest
import torch

from oracle_support import (BF16, F16, T2, TORCH_DTYPE, Cases, Inp, for_dtypes, narrow, permute,
                            positive, randn, restart_seeds, run_case)

restart_seeds()
CASES = Cases()
add_case = CASES.add


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


# BF16 and F16 inputs: microllm computes in F32 and rounds once; judged by relative L2
# (SPEC §6, <= 1e-2) against the F32 PyTorch result on the same representable inputs.
def _narrow(dt):
    add_case("dense", "add", [Inp("a", randn((4, 8), dt)), Inp("b", randn((8,), dt))],
             lambda t, a: t["a"] + t["b"], dtype=dt)


for_dtypes(_narrow, (BF16, F16))


# ---- tests -------------------------------------------------------------------------------
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_op(case, tmp_path):
    run_case(case, tmp_path)
