"""PyTorch oracle for attention (GQA, decode, explicit positions, a custom scale, Hugging
Face's layout as views): forward output and every input gradient against torch autograd
through microllm_op_runner (protocol, seeds and SPEC §6 tolerances:
tests/oracle/oracle_support.py).
"""
import math

import pytest
import torch

from oracle_support import (BF16, F16, Cases, Inp, for_dtypes, permute, randn, restart_seeds,
                            run_case)

restart_seeds()
CASES = Cases()
add_case = CASES.add


def _attention_ref(t, a):
    """Explicit reference: S = Q·Kᵀ·scale, causal mask by position, softmax in F32 (F64 for
    F64), ·V; query head h reads KV head h // (H / Hkv) (repeat_interleave)."""
    q, k, v = t["q"], t["k"], t["v"]
    H, T, D = q.shape[1], q.shape[2], q.shape[3]
    Hkv, S = k.shape[1], k.shape[2]
    k = k.repeat_interleave(H // Hkv, dim=1)
    v = v.repeat_interleave(H // Hkv, dim=1)
    scale = a["scale"] if a.get("scale") is not None else 1.0 / math.sqrt(D)
    scores = torch.matmul(q, k.transpose(-1, -2)) * scale  # (B, H, T, S)
    if a["causal"]:
        q_pos = t["q_positions"].long() if "q_positions" in t else torch.arange(S - T, S)
        k_pos = t["k_positions"].long() if "k_positions" in t else torch.arange(S)
        scores = scores.masked_fill(k_pos[None, :] > q_pos[:, None], float("-inf"))
    compute = torch.float64 if q.dtype == torch.float64 else torch.float32
    probs = torch.softmax(scores.to(compute), dim=-1).to(q.dtype)
    return torch.matmul(probs, v)


def _attention(dt):
    def qkv(B, H, Hkv, T, S, D, q_view=(), kv_view=()):
        return [Inp("q", randn((B, H, T, D), dt), view=list(q_view)),
                Inp("k", randn((B, Hkv, S, D), dt), view=list(kv_view)),
                Inp("v", randn((B, Hkv, S, D), dt), view=list(kv_view))]

    causal = {"causal": True, "scale": None}
    # Qwen-like GQA: 14 query heads share 2 KV heads, head dim 64.
    for T in (16, 33):
        add_case(f"gqa14x2_T{T}", "attention", qkv(1, 14, 2, T, T, 64), _attention_ref,
                 args=causal, dtype=dt)
    add_case("gqa14x2_B2_T19", "attention", qkv(2, 14, 2, 19, 19, 64), _attention_ref,
             args=causal, dtype=dt)
    # Decode-like: T < S, queries are the last T positions by default.
    add_case("decode_T1_S20", "attention", qkv(1, 14, 2, 1, 20, 64), _attention_ref,
             args=causal, dtype=dt)
    add_case("chunk_T5_S21", "attention", qkv(2, 4, 2, 5, 21, 32), _attention_ref,
             args=causal, dtype=dt)
    # Explicit positions (packed/chunked prefill): queries at 7..12 over keys 3..22.
    add_case("positions", "attention",
             qkv(2, 6, 3, 6, 20, 16) + [Inp("q_positions", torch.arange(7, 13), grad=False),
                                        Inp("k_positions", torch.arange(3, 23), grad=False)],
             _attention_ref, args=causal, dtype=dt)
    add_case("positions_i32_unsorted", "attention",
             qkv(1, 2, 1, 4, 6, 8) + [
                 Inp("q_positions", torch.tensor([5, 2, 9, 3], dtype=torch.int32), grad=False),
                 Inp("k_positions", torch.tensor([0, 4, 1, 8, 2, 3], dtype=torch.int32), grad=False)],
             _attention_ref, args=causal, dtype=dt)
    add_case("noncausal_scale0.3", "attention", qkv(2, 4, 4, 9, 12, 16), _attention_ref,
             args={"causal": False, "scale": 0.3}, dtype=dt)
    # Q, K, V as Hugging Face lays them out: (B, T, heads, D) seen as (B, heads, T, D).
    add_case("hf_layout_views", "attention",
             qkv(2, 14, 2, 17, 17, 64, q_view=[permute(0, 2, 1, 3)], kv_view=[permute(0, 2, 1, 3)]),
             _attention_ref, args=causal, dtype=dt)


for_dtypes(_attention)


# Realistic width (SPEC §4.12: hidden 2048, 32 heads, 4 KV heads, head dim 128, FFN 5472,
# a 32000 vocabulary), F32. Sums of 2048 products have F32 rounding errors that grow with
# the sum's magnitude, so such cases scale atol by max|ref| (accumulates=True).
def _realistic():
    add_case("gqa32x4_D128", "attention", [Inp("q", randn((1, 32, 48, 128))), Inp("k", randn((1, 4, 48, 128))),
                                           Inp("v", randn((1, 4, 48, 128)))], _attention_ref,
             args={"causal": True, "scale": None}, accumulates=True)


_realistic()


# BF16 and F16 inputs: microllm computes in F32 and rounds once; judged by relative L2
# (SPEC §6, <= 1e-2) against the F32 PyTorch result on the same representable inputs.
def _narrow(dt):
    add_case("gqa", "attention", [Inp("q", randn((1, 4, 9, 32), dt)), Inp("k", randn((1, 2, 9, 32), dt)),
                                  Inp("v", randn((1, 2, 9, 32), dt))], _attention_ref,
             args={"causal": True, "scale": None}, dtype=dt)


for_dtypes(_narrow, (BF16, F16))


# ---- tests -------------------------------------------------------------------------------
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_op(case, tmp_path):
    run_case(case, tmp_path)
