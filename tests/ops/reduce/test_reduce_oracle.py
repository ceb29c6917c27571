"""PyTorch oracle for the reductions (sum, mean, max, argmax, sum_all, mean_all): forward
output and every input gradient against torch autograd through microllm_op_runner (protocol,
seeds and SPEC §6 tolerances: tests/oracle/oracle_support.py).
"""
import pytest
import torch

from oracle_support import (T2, TORCH_DTYPE, Cases, Inp, for_dtypes, narrow, permute, randn,
                            restart_seeds, run_case)

restart_seeds()
CASES = Cases()
add_case = CASES.add


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


# ---- tests -------------------------------------------------------------------------------
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_op(case, tmp_path):
    run_case(case, tmp_path)
