"""PyTorch oracle for embedding: forward output and every input gradient against torch autograd
through microllm_op_runner (protocol, seeds and SPEC §6 tolerances:
tests/oracle/oracle_support.py).
"""
import pytest
import torch
import torch.nn.functional as F

from oracle_support import (BF16, F16, T2, Cases, Inp, for_dtypes, randint, randn, restart_seeds,
                            run_case)

restart_seeds()
CASES = Cases()
add_case = CASES.add


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


# BF16 and F16 inputs: microllm computes in F32 and rounds once; judged by relative L2
# (SPEC §6, <= 1e-2) against the F32 PyTorch result on the same representable inputs.
def _narrow(dt):
    add_case("ids", "embedding", [Inp("weight", randn((7, 8), dt)), Inp("ids", torch.tensor([1, 6, 1]), grad=False)],
             lambda t, a: F.embedding(t["ids"], t["weight"]), dtype=dt)


for_dtypes(_narrow, (BF16, F16))


# ---- tests -------------------------------------------------------------------------------
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_op(case, tmp_path):
    run_case(case, tmp_path)
