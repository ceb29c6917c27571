"""PyTorch oracle for cast (bitwise equal, every dtype pair used): forward output and every
input gradient against torch autograd through microllm_op_runner (protocol, seeds and SPEC
§6 tolerances: tests/oracle/oracle_support.py).
"""
import pytest
import torch

from oracle_support import (BF16, F32, F64, T2, Cases, Inp, for_dtypes, randn, restart_seeds,
                            run_case)

restart_seeds()
CASES = Cases()
add_case = CASES.add


def _cast(dt):
    cast_to = {F32: ("f64", "f16", "bf16", "i32", "i64"), F64: ("f32", "bf16")}[dt]
    torch_to = {"f64": torch.float64, "f32": torch.float32, "f16": torch.float16,
                "bf16": torch.bfloat16, "i32": torch.int32, "i64": torch.int64}
    for to in cast_to:
        floating = to[0] in "fb"
        x = randn((4, 7), dt, scale=3.0)
        add_case(f"to_{to}", "cast", [Inp("x", x, grad=floating)],
                 lambda t, a: t["x"].to(torch_to[a["to"]]), args={"to": to}, dtype=dt, exact=True)
    add_case("to_f32_transposed", "cast", [Inp("x", randn((4, 7), dt), view=[T2])],
             lambda t, a: t["x"].to(torch.float32), args={"to": "f32"}, dtype=dt, exact=True)


for_dtypes(_cast)
# From BF16: exact, and the gradient is rounded to BF16 on the way back as in PyTorch.
add_case("from_bf16", "cast", [Inp("x", randn((3, 5), BF16))],
         lambda t, a: t["x"].to(torch.bfloat16).to(torch.float32), args={"to": "f32"}, dtype=BF16, exact=True)


# ---- tests -------------------------------------------------------------------------------
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_op(case, tmp_path):
    run_case(case, tmp_path)
