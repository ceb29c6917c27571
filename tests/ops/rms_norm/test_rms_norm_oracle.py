"""PyTorch oracle for rms_norm and add_rms_norm (Hugging Face's LlamaRMSNorm): forward output
and every input gradient against torch autograd through microllm_op_runner (protocol, seeds
and SPEC §6 tolerances: tests/oracle/oracle_support.py).
"""
import pytest
import torch

from oracle_support import (BF16, F16, Cases, Inp, for_dtypes, narrow, permute, randn,
                            restart_seeds, run_case)

restart_seeds()
CASES = Cases()
add_case = CASES.add


def _hf_rms_norm(x, weight, eps):
    """Hugging Face LlamaRMSNorm: statistics in float32 (float64 stays float64)."""
    h = x.float() if x.dtype != torch.float64 else x
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return weight * h.to(x.dtype)


def _norms(dt):
    ref = lambda t, a: _hf_rms_norm(t["x"], t["weight"], a["eps"])
    add_case("BTC", "rms_norm", [Inp("x", randn((2, 5, 32), dt)), Inp("weight", randn((32,), dt))],
             ref, args={"eps": 1e-6}, dtype=dt)
    add_case("permuted_eps1e-5", "rms_norm",
             [Inp("x", randn((3, 4, 64), dt), view=[permute(1, 0, 2)]), Inp("weight", randn((64,), dt))],
             ref, args={"eps": 1e-5}, dtype=dt)
    add_case("small_values", "rms_norm",
             [Inp("x", randn((6, 16), dt, scale=1e-3)), Inp("weight", randn((16,), dt))],
             ref, args={"eps": 1e-6}, dtype=dt)

    def add_ref(t, a):
        s = t["x"] + t["residual"]
        return {"out": _hf_rms_norm(s, t["weight"], a["eps"]), "sum": s}

    add_case("BTC", "add_rms_norm", [Inp("x", randn((2, 5, 32), dt)), Inp("residual", randn((2, 5, 32), dt)),
                                     Inp("weight", randn((32,), dt))],
             add_ref, args={"eps": 1e-6}, dtype=dt)
    add_case("views", "add_rms_norm",
             [Inp("x", randn((4, 24), dt), view=[narrow(1, 1, 24)]), Inp("residual", randn((4, 24), dt)),
              Inp("weight", randn((24,), dt))], add_ref, args={"eps": 1e-5}, dtype=dt)


for_dtypes(_norms)


# Realistic width (SPEC §4.12: hidden 2048, 32 heads, 4 KV heads, head dim 128, FFN 5472,
# a 32000 vocabulary), F32. Sums of 2048 products have F32 rounding errors that grow with
# the sum's magnitude, so such cases scale atol by max|ref| (accumulates=True).
def _realistic():
    add_case("hidden2048", "rms_norm", [Inp("x", randn((4, 2048))), Inp("weight", randn((2048,)))],
             lambda t, a: _hf_rms_norm(t["x"], t["weight"], a["eps"]), args={"eps": 1e-6}, accumulates=True)


_realistic()


# BF16 and F16 inputs: microllm computes in F32 and rounds once; judged by relative L2
# (SPEC §6, <= 1e-2) against the F32 PyTorch result on the same representable inputs.
def _narrow(dt):
    add_case("BTC", "rms_norm", [Inp("x", randn((2, 3, 32), dt)), Inp("weight", randn((32,), dt))],
             lambda t, a: _hf_rms_norm(t["x"], t["weight"], a["eps"]), args={"eps": 1e-6}, dtype=dt)


for_dtypes(_narrow, (BF16, F16))


# ---- tests -------------------------------------------------------------------------------
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_op(case, tmp_path):
    run_case(case, tmp_path)
