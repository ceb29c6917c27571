"""PyTorch oracle for softmax and log_softmax: forward output and every input gradient against
torch autograd through microllm_op_runner (protocol, seeds and SPEC §6 tolerances:
tests/oracle/oracle_support.py).
"""
import pytest
import torch

from oracle_support import (BF16, F16, Cases, Inp, for_dtypes, permute, randn, restart_seeds,
                            run_case)

restart_seeds()
CASES = Cases()
add_case = CASES.add


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


# Realistic width (SPEC §4.12: hidden 2048, 32 heads, 4 KV heads, head dim 128, FFN 5472,
# a 32000 vocabulary), F32. Sums of 2048 products have F32 rounding errors that grow with
# the sum's magnitude, so such cases scale atol by max|ref| (accumulates=True).
def _realistic():
    add_case("vocab32000", "log_softmax", [Inp("x", randn((4, 32000), scale=2.0))],
             lambda t, a: torch.log_softmax(t["x"], -1), args={"dim": -1}, accumulates=True)


_realistic()


# BF16 and F16 inputs: microllm computes in F32 and rounds once; judged by relative L2
# (SPEC §6, <= 1e-2) against the F32 PyTorch result on the same representable inputs.
def _narrow(dt):
    add_case("d-1", "softmax", [Inp("x", randn((3, 17), dt))], lambda t, a: torch.softmax(t["x"], -1),
             args={"dim": -1}, dtype=dt)


for_dtypes(_narrow, (BF16, F16))


# ---- tests -------------------------------------------------------------------------------
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_op(case, tmp_path):
    run_case(case, tmp_path)
