"""PyTorch oracle for index_select: forward output and every input gradient against torch
autograd through microllm_op_runner (protocol, seeds and SPEC §6 tolerances:
tests/oracle/oracle_support.py).
"""
import pytest
import torch

from oracle_support import (Cases, Inp, for_dtypes, permute, randn, restart_seeds, run_case)

restart_seeds()
CASES = Cases()
add_case = CASES.add


def _index_select(dt):
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


for_dtypes(_index_select)


# ---- tests -------------------------------------------------------------------------------
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_op(case, tmp_path):
    run_case(case, tmp_path)
