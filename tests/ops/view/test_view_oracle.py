"""PyTorch oracle for the tensor views (reshape, view, permute, transpose, narrow, slice,
expand, squeeze, unsqueeze, flatten, contiguous): forward output and every input gradient
against torch autograd through microllm_op_runner (protocol, seeds and SPEC §6 tolerances:
tests/oracle/oracle_support.py).
"""
import pytest
import torch

from oracle_support import (T2, Cases, Inp, for_dtypes, permute, randn, restart_seeds, run_case)

restart_seeds()
CASES = Cases()
add_case = CASES.add


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


# ---- tests -------------------------------------------------------------------------------
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_op(case, tmp_path):
    run_case(case, tmp_path)
