"""An explicit PyTorch implementation of microllm's dense transformer (qwen2, llama, qwen3).

Written from the equations of the Hugging Face modeling code (Qwen2, Llama, Qwen3) so that it
runs on any torch (Debian's 1.13 has no transformers): RMSNorm in F32 then cast, rotate-half
RoPE with llama3 scaling, GQA attention with an explicit causal mask and an F32 softmax,
SwiGLU MLP, tied or untied LM head. Parameters are a dict of Hugging Face names → tensors.

`forward(..., observe=fn)` calls fn(name, value) for every named intermediate, with the names
microllm's Transformer uses (src/model/transformer.cpp), in forward order:
  embedding, layers.{i}.{input, attn.norm, attn.q, attn.k, attn.v, attn.out, attn.residual,
  mlp.norm, mlp.act, mlp.out, output}, final_norm, logits.
Used by the model oracle test (tests/model/test_model_oracle.py) and the alignment runner
(tools/alignment/pytorch_runner.py).
"""

from __future__ import annotations

import math

import torch


def head_dim(cfg: dict) -> int:
    return cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]


def rope_inv_freq(cfg: dict) -> torch.Tensor:
    """(D/2) F32 inverse frequencies, with the llama3 or linear scaling of config.json."""
    d = head_dim(cfg)
    inv = 1.0 / (cfg["rope_theta"] ** (torch.arange(0, d, 2, dtype=torch.int64).float() / d))
    scaling = cfg.get("rope_scaling") or {}
    kind = scaling.get("rope_type", scaling.get("type"))
    if kind == "llama3":
        factor, low, high = scaling["factor"], scaling["low_freq_factor"], scaling["high_freq_factor"]
        old = scaling["original_max_position_embeddings"]
        low_wavelen, high_wavelen = old / low, old / high
        wavelen = 2 * math.pi / inv
        scaled = torch.where(wavelen > low_wavelen, inv / factor, inv)
        smooth = (old / wavelen - low) / (high - low)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = ~(wavelen < high_wavelen) * ~(wavelen > low_wavelen)
        inv = torch.where(medium, smoothed, scaled)
    elif kind == "linear":
        inv = inv / scaling["factor"]
    return inv


def rms_norm(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    dtype = x.dtype
    x32 = x.to(torch.float32) if dtype != torch.float64 else x
    var = x32.pow(2).mean(-1, keepdim=True)
    return w * (x32 * torch.rsqrt(var + eps)).to(dtype)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def forward(cfg: dict, p: dict, ids: torch.Tensor, dtype: torch.dtype, observe=None) -> torch.Tensor:
    """ids (B, T) int64 → logits (B, T, V) in `dtype`; observe(name, value) for each intermediate."""
    emit = observe or (lambda name, value: None)
    B, T = ids.shape
    H, Hkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    D = head_dim(cfg)
    eps = cfg["rms_norm_eps"]
    device = ids.device
    x = p["model.embed_tokens.weight"][ids]  # (B, T, C)
    emit("embedding", x)
    # HF forms the angles and cos/sin in F32 and casts them to the model dtype. microllm's
    # F64 path keeps them in F64 (its purpose is an exact reference), so F64 does the same.
    angle_dtype = torch.float64 if dtype == torch.float64 else torch.float32
    inv = rope_inv_freq(cfg).to(device)
    pos = torch.arange(T, dtype=torch.float32, device=device).to(angle_dtype)
    freqs = torch.outer(pos, inv.to(angle_dtype))  # (T, D/2)
    emb = torch.cat((freqs, freqs), dim=-1)  # (T, D)
    cos, sin = emb.cos().to(dtype), emb.sin().to(dtype)
    mask = torch.full((T, T), float("-inf"), dtype=dtype, device=device).triu(1)  # (T, T)
    for i in range(cfg["num_hidden_layers"]):
        pre, n = f"model.layers.{i}.", f"layers.{i}."
        emit(n + "input", x)
        h = rms_norm(x, p[pre + "input_layernorm.weight"], eps)  # (B, T, C)
        emit(n + "attn.norm", h)

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
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # (B, H|Hkv, T, D)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        emit(n + "attn.q", q)
        emit(n + "attn.k", k)
        emit(n + "attn.v", v)
        k_rep = k.repeat_interleave(H // Hkv, dim=1)  # (B, H, T, D)
        v_rep = v.repeat_interleave(H // Hkv, dim=1)
        scores = q @ k_rep.transpose(-1, -2) / math.sqrt(D) + mask  # (B, H, T, T)
        probs = torch.softmax(scores.to(torch.float32 if dtype != torch.float64 else dtype), dim=-1).to(dtype)
        a = (probs @ v_rep).transpose(1, 2).reshape(B, T, H * D)
        attn_out = torch.nn.functional.linear(a, p[pre + "self_attn.o_proj.weight"])  # (B, T, C)
        emit(n + "attn.out", attn_out)
        x = x + attn_out
        emit(n + "attn.residual", x)
        h = rms_norm(x, p[pre + "post_attention_layernorm.weight"], eps)
        emit(n + "mlp.norm", h)
        gate = torch.nn.functional.linear(h, p[pre + "mlp.gate_proj.weight"])  # (B, T, F)
        up = torch.nn.functional.linear(h, p[pre + "mlp.up_proj.weight"])
        act = torch.nn.functional.silu(gate) * up
        emit(n + "mlp.act", act)
        mlp_out = torch.nn.functional.linear(act, p[pre + "mlp.down_proj.weight"])  # (B, T, C)
        emit(n + "mlp.out", mlp_out)
        x = x + mlp_out
        emit(n + "output", x)
    h = rms_norm(x, p["model.norm.weight"], eps)
    emit("final_norm", h)
    head = p["model.embed_tokens.weight"] if cfg.get("tie_word_embeddings", False) else p["lm_head.weight"]
    logits = torch.nn.functional.linear(h, head)  # (B, T, V)
    emit("logits", logits)
    return logits


def next_token_loss(logits: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy of position t predicting ids[t+1], as Hugging Face computes it."""
    V = logits.shape[-1]
    if logits.dtype in (torch.bfloat16, torch.float16):
        logits = logits.float()  # microllm's loss kernels accumulate in F32 too
    return torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, V), ids[:, 1:].reshape(-1))
