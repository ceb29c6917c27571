"""PyTorch oracle for rope and rope_inv_freq (Hugging Face's rotary embedding): forward output
and every input gradient against torch autograd through microllm_op_runner (protocol, seeds
and SPEC §6 tolerances: tests/oracle/oracle_support.py).
"""
import pytest
import torch

from oracle_support import (F64, TORCH_DTYPE, Cases, Inp, for_dtypes, permute, randn, restart_seeds,
                            run_case)

restart_seeds()
CASES = Cases()
add_case = CASES.add


def _hf_inv_freq(D, theta, dtype=torch.float32):
    """Hugging Face _compute_default_rope_parameters: float32 unless asked otherwise."""
    return 1.0 / (theta ** (torch.arange(0, D, 2, dtype=torch.int64).to(dtype) / D))


def _hf_rope(x, positions, inv_freq):
    """Hugging Face LlamaRotaryEmbedding + apply_rotary_pos_emb (rotate_half)."""
    pos = positions if positions.dim() == 2 else positions[None]  # (B or 1, T)
    freqs = pos.to(inv_freq.dtype)[..., None] * inv_freq  # (B, T, D/2)
    emb = torch.cat((freqs, freqs), dim=-1)  # (B, T, D)
    cos, sin = emb.cos()[:, None].to(x.dtype), emb.sin()[:, None].to(x.dtype)  # (B, 1, T, D)
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


def _rope(dt):
    def ref(t, a):
        inv = t["inv_freq"] if "inv_freq" in t else _hf_inv_freq(t["x"].shape[-1], a["theta"])
        return _hf_rope(t["x"], t["positions"], inv)

    B, H, T, D = 2, 3, 7, 16
    pos_cases = [
        ("from0", torch.arange(T)),
        ("offset5", torch.arange(5, 5 + T)),
        ("offset4090", torch.arange(4090, 4090 + T)),
        ("per_batch", torch.stack([torch.arange(3, 3 + T), torch.arange(100, 100 + T)])),
        ("scattered_i32", torch.tensor([0, 9, 2, 31, 7, 500, 64], dtype=torch.int32)),
    ]
    for theta in (1e4, 1e6):
        for name, pos in pos_cases:
            inputs = [Inp("x", randn((B, H, T, D), dt)), Inp("positions", pos, grad=False)]
            if dt == F64:  # F64 frequencies, so the whole reference runs in F64
                inputs.append(Inp("inv_freq", _hf_inv_freq(D, theta, torch.float64), grad=False))
            add_case(f"theta{theta:g}_{name}", "rope", inputs, ref, args={"theta": theta}, dtype=dt)
    # q as Hugging Face lays it out: a (B, T, H, D) projection seen as (B, H, T, D).
    inputs = [Inp("x", randn((B, H, T, 64), dt), view=[permute(0, 2, 1, 3)]),
              Inp("positions", torch.arange(11, 11 + T), grad=False)]
    if dt == F64:
        inputs.append(Inp("inv_freq", _hf_inv_freq(64, 1e6, torch.float64), grad=False))
    add_case("permuted_D64", "rope", inputs, ref, args={"theta": 1e6}, dtype=dt)
    # Scaled frequencies come from the model config as an input ("linear" scaling, factor 8).
    inv_freq = _hf_inv_freq(32, 5e5, TORCH_DTYPE[dt]) / 8
    add_case("given_inv_freq", "rope", [Inp("x", randn((1, 2, 5, 32), dt)),
                                        Inp("positions", torch.arange(1000, 1005), grad=False),
                                        Inp("inv_freq", inv_freq, grad=False)], ref, dtype=dt)


for_dtypes(_rope)


def _rope_qkv_heads(dt):
    """The joined projection (B, T, H + 2·Hkv, D) as Hugging Face's attention takes it apart:
    q, k, v = split along the heads, each transposed to (B, heads, T, D), rope on q and k."""
    def ref(t, a):
        H, Hkv = a["num_heads"], a["num_kv_heads"]
        q, k, v = torch.split(t["qkv"], [H, Hkv, Hkv], dim=2)
        inv = t["inv_freq"] if "inv_freq" in t else _hf_inv_freq(t["qkv"].shape[-1], a["theta"])
        return {"out": _hf_rope(q.transpose(1, 2), t["positions"], inv),
                "k": _hf_rope(k.transpose(1, 2), t["positions"], inv),
                "v": v.transpose(1, 2)}

    B, T = 2, 5
    for name, H, Hkv, D, pos in [("gqa_D16", 4, 2, 16, torch.arange(3, 3 + T)),
                                 ("mha_D8_per_batch", 2, 2, 8,
                                  torch.tensor([[0, 9, 2, 31, 7], [500, 64, 1, 2, 3]],
                                               dtype=torch.int32))]:
        inputs = [Inp("qkv", randn((B, T, H + 2 * Hkv, D), dt)),
                  Inp("positions", pos, grad=False)]
        if dt == F64:
            inputs.append(Inp("inv_freq", _hf_inv_freq(D, 1e6, torch.float64), grad=False))
        add_case(name, "rope_qkv_heads", inputs, ref,
                 args={"num_heads": H, "num_kv_heads": Hkv, "theta": 1e6}, dtype=dt)


for_dtypes(_rope_qkv_heads)


for D in (16, 64, 128):
    for theta in (1e4, 5e5, 1e6):
        add_case(f"D{D}_theta{theta:g}", "rope_inv_freq", [],
                 lambda t, a: _hf_inv_freq(a["head_dim"], a["theta"]),
                 args={"head_dim": D, "theta": theta})


# ---- tests -------------------------------------------------------------------------------
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_op(case, tmp_path):
    run_case(case, tmp_path)
