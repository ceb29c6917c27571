"""PyTorch oracle for cross_entropy: forward output and every input gradient against torch
autograd through microllm_op_runner (protocol, seeds and SPEC §6 tolerances:
tests/oracle/oracle_support.py).
"""
import pytest
import torch
import torch.nn.functional as F

from oracle_support import (T2, Cases, Inp, for_dtypes, randint, randn, restart_seeds, run_case)

restart_seeds()
CASES = Cases()
add_case = CASES.add


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


# Realistic width (SPEC §4.12: hidden 2048, 32 heads, 4 KV heads, head dim 128, FFN 5472,
# a 32000 vocabulary), F32. Sums of 2048 products have F32 rounding errors that grow with
# the sum's magnitude, so such cases scale atol by max|ref| (accumulates=True).
def _realistic():
    add_case("vocab32000", "cross_entropy", [Inp("logits", randn((8, 32000), scale=2.0)),
                                             Inp("targets", randint(0, 32000, (8,)), grad=False)],
             lambda t, a: F.cross_entropy(t["logits"], t["targets"]), args={"ignore_index": -100},
             accumulates=True)


_realistic()


# ---- tests -------------------------------------------------------------------------------
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_op(case, tmp_path):
    run_case(case, tmp_path)
