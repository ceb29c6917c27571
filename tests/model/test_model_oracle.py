"""The transformer against an explicit PyTorch implementation of the same architecture.

For a tiny model of each family (qwen2 with q/k/v biases, llama with llama3 RoPE scaling
and an untied LM head, qwen3 with QK-norm and head_dim ≠ C/H), microllm_model_runner
writes its random parameters, logits, loss, every parameter gradient and every named
intermediate; this file rebuilds the model in torch from the parameters (written here
from the Hugging Face modeling code's equations, since Debian's torch 1.13 has no
transformers) and compares all of them (SPEC §6: F32 logits ≤ 1e-4, gradients ≤ 1e-4
relative to the largest element; F64 far tighter).
"""

import json
import math
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch

RUNNER = os.environ.get("MICROLLM_MODEL_RUNNER")

CONFIGS = {
    "qwen2": {"model_type": "qwen2", "vocab_size": 97, "hidden_size": 32, "intermediate_size": 56,
              "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
              "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "tie_word_embeddings": True,
              "max_position_embeddings": 64, "hidden_act": "silu"},
    "llama": {"model_type": "llama", "vocab_size": 101, "hidden_size": 48, "intermediate_size": 64,
              "num_hidden_layers": 2, "num_attention_heads": 6, "num_key_value_heads": 2, "head_dim": 8,
              "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "tie_word_embeddings": False,
              "max_position_embeddings": 64, "attention_bias": False, "mlp_bias": False,
              "rope_scaling": {"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
                               "high_freq_factor": 4.0, "original_max_position_embeddings": 16}},
    "qwen3": {"model_type": "qwen3", "vocab_size": 89, "hidden_size": 40, "intermediate_size": 48,
              "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 16,
              "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "tie_word_embeddings": True,
              "max_position_embeddings": 64, "attention_bias": False},
}


def rope_inv_freq(cfg):
    d = cfg.get("head_dim", cfg["hidden_size"] // cfg["num_attention_heads"])
    inv = 1.0 / (cfg["rope_theta"] ** (torch.arange(0, d, 2, dtype=torch.int64).float() / d))
    scaling = cfg.get("rope_scaling")
    if scaling and scaling["rope_type"] == "llama3":
        factor, low, high = scaling["factor"], scaling["low_freq_factor"], scaling["high_freq_factor"]
        old = scaling["original_max_position_embeddings"]
        low_wavelen, high_wavelen = old / low, old / high
        wavelen = 2 * math.pi / inv
        scaled = torch.where(wavelen > low_wavelen, inv / factor, inv)
        smooth = (old / wavelen - low) / (high - low)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = ~(wavelen < high_wavelen) * ~(wavelen > low_wavelen)
        inv = torch.where(medium, smoothed, scaled)
    return inv


def rms_norm(x, w, eps):
    dtype = x.dtype
    x32 = x.to(torch.float32) if dtype != torch.float64 else x
    var = x32.pow(2).mean(-1, keepdim=True)
    return w * (x32 * torch.rsqrt(var + eps)).to(dtype)


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def reference_forward(cfg, p, ids, dtype):
    """Logits and named intermediates, following the HF Qwen2 / Llama / Qwen3 modeling code."""
    B, T = ids.shape
    H, Hkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    D = cfg.get("head_dim", cfg["hidden_size"] // H)
    eps = cfg["rms_norm_eps"]
    values = {}
    x = p["model.embed_tokens.weight"][ids]
    values["embedding"] = x
    inv = rope_inv_freq(cfg)
    # HF forms the angles and cos/sin in F32 and casts them to the model dtype. microllm's
    # F64 path keeps them in F64 (its purpose is an exact reference), so the F64 check
    # does the same; F32 follows HF exactly.
    angle_dtype = torch.float64 if dtype == torch.float64 else torch.float32
    pos = torch.arange(T, dtype=torch.float32).to(angle_dtype)
    freqs = torch.outer(pos, inv.to(angle_dtype))
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos().to(dtype), emb.sin().to(dtype)
    mask = torch.full((T, T), float("-inf"), dtype=dtype).triu(1)
    for i in range(cfg["num_hidden_layers"]):
        pre, n = f"model.layers.{i}.", f"layers.{i}."
        values[n + "input"] = x
        h = rms_norm(x, p[pre + "input_layernorm.weight"], eps)
        values[n + "attn.norm"] = h

        def proj(name):
            w = p[pre + f"self_attn.{name}.weight"]
            b = p.get(pre + f"self_attn.{name}.bias")
            return torch.nn.functional.linear(h, w, b)

        q = proj("q_proj").view(B, T, H, D)
        k = proj("k_proj").view(B, T, Hkv, D)
        v = proj("v_proj").view(B, T, Hkv, D)
        if cfg["model_type"] == "qwen3":
            q = rms_norm(q, p[pre + "self_attn.q_norm.weight"], eps)
            k = rms_norm(k, p[pre + "self_attn.k_norm.weight"], eps)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        values[n + "attn.q"], values[n + "attn.k"], values[n + "attn.v"] = q, k, v
        k_rep = k.repeat_interleave(H // Hkv, dim=1)
        v_rep = v.repeat_interleave(H // Hkv, dim=1)
        scores = q @ k_rep.transpose(-1, -2) / math.sqrt(D) + mask
        probs = torch.softmax(scores.to(torch.float32 if dtype != torch.float64 else dtype), dim=-1).to(dtype)
        a = (probs @ v_rep).transpose(1, 2).reshape(B, T, H * D)
        attn_out = torch.nn.functional.linear(a, p[pre + "self_attn.o_proj.weight"])
        values[n + "attn.out"] = attn_out
        x = x + attn_out
        values[n + "attn.residual"] = x
        h = rms_norm(x, p[pre + "post_attention_layernorm.weight"], eps)
        values[n + "mlp.norm"] = h
        gate = torch.nn.functional.linear(h, p[pre + "mlp.gate_proj.weight"])
        up = torch.nn.functional.linear(h, p[pre + "mlp.up_proj.weight"])
        act = torch.nn.functional.silu(gate) * up
        values[n + "mlp.act"] = act
        mlp_out = torch.nn.functional.linear(act, p[pre + "mlp.down_proj.weight"])
        values[n + "mlp.out"] = mlp_out
        x = x + mlp_out
        values[n + "output"] = x
    h = rms_norm(x, p["model.norm.weight"], eps)
    values["final_norm"] = h
    head = p["model.embed_tokens.weight"] if cfg["tie_word_embeddings"] else p["lm_head.weight"]
    logits = torch.nn.functional.linear(h, head)
    values["logits"] = logits
    return logits, values


def run_case(tmp_path, family, dtype_name, seed=3, B=2, T=9):
    assert RUNNER, "MICROLLM_MODEL_RUNNER is not set"
    cfg = CONFIGS[family]
    cfg_path = tmp_path / "config.json"
    cfg_path.write_text(json.dumps(cfg))
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, cfg["vocab_size"], size=(B, T), dtype=np.int64)
    np.save(tmp_path / "ids.npy", ids)
    out = tmp_path / "out"
    subprocess.run([RUNNER, str(cfg_path), str(seed), str(tmp_path / "ids.npy"), str(out), dtype_name],
                   check=True, capture_output=True, text=True)
    return cfg, ids, out


def load_dir(path):
    return {f.name[:-4]: torch.from_numpy(np.load(f)) for f in path.glob("*.npy")}


@pytest.mark.parametrize("family", sorted(CONFIGS))
@pytest.mark.parametrize("dtype_name", ["f32", "f64"])
def test_logits_loss_and_every_gradient(tmp_path, family, dtype_name):
    cfg, ids, out = run_case(tmp_path, family, dtype_name)
    dtype = torch.float64 if dtype_name == "f64" else torch.float32
    tol = 1e-10 if dtype_name == "f64" else 1e-4
    params = {k: v.to(dtype).requires_grad_(True) for k, v in load_dir(out / "param").items()}
    expected_names = {"model.embed_tokens.weight", "model.norm.weight"}
    assert expected_names <= set(params)
    logits, values = reference_forward(cfg, params, torch.from_numpy(ids), dtype)
    T = ids.shape[1]
    loss = torch.nn.functional.cross_entropy(
        logits[:, :-1].reshape(-1, cfg["vocab_size"]), torch.from_numpy(ids)[:, 1:].reshape(-1))
    loss.backward()

    got_logits = torch.from_numpy(np.load(out / "logits.npy"))
    assert got_logits.shape == logits.shape
    assert (got_logits - logits.detach()).abs().max().item() <= tol
    assert abs(float(np.load(out / "loss.npy")) - loss.item()) <= tol

    # Every named intermediate the model emits has a reference twin of the same shape.
    got_values = load_dir(out / "values")
    assert set(got_values) == set(values), set(got_values) ^ set(values)
    for name, ref in values.items():
        ref = ref.detach()
        scale = max(1.0, ref.abs().max().item())
        assert got_values[name].shape == ref.shape, name
        assert (got_values[name] - ref).abs().max().item() <= tol * scale, name

    # Every parameter has a gradient, compared relative to its largest element.
    grads = load_dir(out / "grad")
    assert set(grads) == set(params)
    for name, p in params.items():
        ref = p.grad
        assert ref is not None, name
        scale = max(ref.abs().max().item(), 1e-12)
        err = (grads[name] - ref).abs().max().item() / scale
        assert err <= tol, f"{name}: relative max error {err:.3g}"
