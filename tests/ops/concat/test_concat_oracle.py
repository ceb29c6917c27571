"""PyTorch oracle for concat, join and split (bitwise equal: torch.cat and torch.split):
forward outputs and every input gradient against torch autograd through microllm_op_runner (protocol, seeds and SPEC §6 tolerances:
tests/oracle/oracle_support.py).
"""
import pytest
import torch

from oracle_support import (T2, Cases, Inp, for_dtypes, narrow, randn, restart_seeds, run_case)

restart_seeds()
CASES = Cases()
add_case = CASES.add


def _concat(dt):
    cat_ref = lambda t, a: torch.cat([t[n] for n in ("p0", "p1", "p2")], a["dim"])
    for dim, shapes in ((1, [(2, 3, 4), (2, 5, 4), (2, 1, 4)]), (0, [(1, 6), (4, 6), (2, 6)]),
                        (-1, [(3, 2), (3, 5), (3, 1)])):
        add_case(f"d{dim}", "concat", [Inp(f"p{i}", randn(s, dt)) for i, s in enumerate(shapes)],
                 cat_ref, args={"dim": dim}, dtype=dt, exact=True)
    add_case("views", "concat", [Inp("p0", randn((3, 4), dt), view=[T2]), Inp("p1", randn((3, 2), dt)),
                                 Inp("p2", randn((3, 3), dt), view=[narrow(1, 1, 3)])],
             cat_ref, args={"dim": 1}, dtype=dt, exact=True)


for_dtypes(_concat)


def _join_split(dt):
    join_ref = lambda t, a: torch.cat([t[n] for n in ("p0", "p1", "p2")], a["dim"])
    add_case("rows", "join", [Inp(f"p{i}", randn((r, 5), dt)) for i, r in enumerate((3, 1, 2))],
             join_ref, args={"dim": 0}, dtype=dt, exact=True)
    add_case("last", "join", [Inp(f"p{i}", randn((2, 3, w), dt)) for i, w in enumerate((4, 2, 2))],
             join_ref, args={"dim": -1}, dtype=dt, exact=True)

    def split_ref(t, a):
        parts = torch.split(t["x"], a["sizes"], a["dim"])
        return {"out": parts[0], **{f"part{i}": p for i, p in enumerate(parts) if i > 0}}

    # Q, K and V heads out of one projection: (B, T, H + 2·Hkv, D) along the heads.
    add_case("qkv_heads", "split", [Inp("x", randn((2, 3, 8, 4), dt))], split_ref,
             args={"dim": 2, "sizes": [4, 2, 2]}, dtype=dt, exact=True)
    add_case("halves_of_view", "split", [Inp("x", randn((3, 6), dt), view=[T2])], split_ref,
             args={"dim": -1, "sizes": [2, 0, 4]}, dtype=dt, exact=True)


for_dtypes(_join_split)


# ---- tests -------------------------------------------------------------------------------
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_op(case, tmp_path):
    run_case(case, tmp_path)
