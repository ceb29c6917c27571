"""A decoder with a preallocated KV cache in plain PyTorch: the compiled peer of the decode
benchmark (bench/generate/torch_generate.py).

Qwen2-style (Llama and Qwen3 switches too): embedding, L × (RMSNorm, fused q/k/v projection
with optional biases, optional QK-norm, rotate-half RoPE, cache write, GQA attention, o
projection + residual, RMSNorm, fused gate/up projection, SwiGLU, down projection +
residual), final RMSNorm, LM head on the last position only. Written from the equations of
the Hugging Face modeling code, as tools/alignment/torch_reference.py is (whose RoPE
frequencies it uses); no transformers import, so it runs on any torch.

Memory layout: the cache is two buffers (L, B, Hkv, S, D), S = the longest sequence; a step
writes its T new keys and values at `positions` (T) and attends over all S slots with a mask
that hides slots after the query's position, so every decode step has the same shapes (the
condition for one CUDA graph per batch size, as in gpt-fast). Prefill (positions 0..T-1)
attends causally over the first T slots only.

Attention "auto" (the default): prefill through SDPA (causal, enable_gqa: the flash kernel);
decode through grouped matmuls, the G = H / Hkv query heads of a KV head as the rows of one
(G, D) × (D, S) product, so the cache is read once and never repeated per query head (SDPA
with a mask and GQA may fall back to a kernel that copies K and V per head). "sdpa" and
"matmul" use one path for both; torch < 2.5 (no enable_gqa) runs "matmul".

Parameters come in as a dict of Hugging Face names → tensors, fused once by fuse_params, and
are kept as buffers, so torch.compile treats them (and the cache) as static inputs.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools" / "alignment"))
import torch_reference  # noqa: E402  (RoPE inverse frequencies with llama3 / linear scaling)


def sdpa_has_gqa() -> bool:
    """Whether this torch's scaled_dot_product_attention takes enable_gqa (2.5 and later)."""
    try:
        q = torch.zeros(1, 2, 1, 4)
        F.scaled_dot_product_attention(q, q[:, :1], q[:, :1], enable_gqa=True)
        return True
    except (AttributeError, TypeError, RuntimeError):
        return False


def rms_norm(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    """HF's RMSNorm: statistics in F32, scaled back in the input dtype."""
    x32 = x.float()
    return w * (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def fuse_params(params: dict, num_layers: int) -> dict:
    """HF-named parameters → the model's own names, q/k/v and gate/up concatenated. Pops the
    HF tensors as it goes, so the unfused copies are freed once the caller drops its dict."""
    fused = {"embed": params.pop("model.embed_tokens.weight"),  # (V, C)
             "norm": params.pop("model.norm.weight")}  # (C)
    head = params.pop("lm_head.weight", None)
    for i in range(num_layers):
        pre, out = f"model.layers.{i}.", f"layers.{i}."
        qkv = [params.pop(pre + f"self_attn.{n}_proj.weight") for n in "qkv"]
        fused[out + "w_qkv"] = torch.cat(qkv, 0)  # ((H + 2·Hkv)·D, C)
        bias = [params.pop(pre + f"self_attn.{n}_proj.bias", None) for n in "qkv"]
        fused[out + "b_qkv"] = torch.cat(bias, 0) if bias[0] is not None else None  # ((H + 2·Hkv)·D)
        fused[out + "w_o"] = params.pop(pre + "self_attn.o_proj.weight")  # (C, H·D)
        fused[out + "q_norm"] = params.pop(pre + "self_attn.q_norm.weight", None)  # (D) or None
        fused[out + "k_norm"] = params.pop(pre + "self_attn.k_norm.weight", None)  # (D) or None
        gate_up = [params.pop(pre + "mlp.gate_proj.weight"), params.pop(pre + "mlp.up_proj.weight")]
        fused[out + "w_gate_up"] = torch.cat(gate_up, 0)  # (2F, C)
        fused[out + "w_down"] = params.pop(pre + "mlp.down_proj.weight")  # (C, F)
        fused[out + "norm1"] = params.pop(pre + "input_layernorm.weight")  # (C)
        fused[out + "norm2"] = params.pop(pre + "post_attention_layernorm.weight")  # (C)
        del qkv, gate_up
    fused["head"] = head  # (V, C), None when tied
    return fused


class Layer(torch.nn.Module):
    """One decoder layer's weights, as buffers (static inputs of a compiled graph)."""

    _NAMES = ("w_qkv", "b_qkv", "w_o", "q_norm", "k_norm", "w_gate_up", "w_down", "norm1", "norm2")

    def __init__(self, fused: dict, i: int):
        super().__init__()
        for name in self._NAMES:
            self.register_buffer(name, fused[f"layers.{i}.{name}"])


class StaticCacheModel(torch.nn.Module):
    """forward(tokens (B, T), positions (T)) → logits of the last position (B, V). `fused`
    is fuse_params' dict; the model holds views of it (no copies)."""

    def __init__(self, cfg: dict, fused: dict, batch: int, max_seq: int, attention: str = "auto"):
        super().__init__()
        self.C, self.V = cfg["hidden_size"], cfg["vocab_size"]
        self.H, self.Hkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
        self.D = torch_reference.head_dim(cfg)
        self.L, self.eps, self.attention = cfg["num_hidden_layers"], cfg["rms_norm_eps"], attention
        if attention not in ("auto", "sdpa", "matmul"):
            raise ValueError(f"attention must be auto, sdpa or matmul, got {attention}")
        if attention != "matmul" and not sdpa_has_gqa():
            if attention == "sdpa":
                raise ValueError("this torch's scaled_dot_product_attention has no enable_gqa (torch < 2.5)")
            self.attention = "matmul"
        embed = fused["embed"]  # (V, C)
        dtype, device = embed.dtype, embed.device
        self.layers = torch.nn.ModuleList(Layer(fused, i) for i in range(self.L))
        self.register_buffer("embed", embed)
        self.register_buffer("norm", fused["norm"])  # (C)
        tied = cfg.get("tie_word_embeddings", False)
        self.register_buffer("head", embed if tied else fused["head"])  # (V, C)
        # HF forms the angles and cos/sin in F32, then casts them to the model dtype.
        inv = torch_reference.rope_inv_freq(cfg).to(device)  # (D/2)
        freqs = torch.outer(torch.arange(max_seq, device=device, dtype=torch.float32), inv)  # (S, D/2)
        emb = torch.cat((freqs, freqs), dim=-1)  # (S, D)
        self.register_buffer("cos", emb.cos().to(dtype))  # (S, D)
        self.register_buffer("sin", emb.sin().to(dtype))  # (S, D)
        self.register_buffer("slots", torch.arange(max_seq, device=device))  # (S)
        shape = (self.L, batch, self.Hkv, max_seq, self.D)
        self.register_buffer("k_cache", torch.zeros(shape, dtype=dtype, device=device))  # (L, B, Hkv, S, D)
        self.register_buffer("v_cache", torch.zeros(shape, dtype=dtype, device=device))  # (L, B, Hkv, S, D)

    def kv_bytes(self) -> int:
        return 2 * self.k_cache.numel() * self.k_cache.element_size()

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, positions: torch.Tensor,
               prefill: bool) -> torch.Tensor:
        """q (B, H, T, D); k, v (B, Hkv, S, D) → (B, H, T, D)."""
        B, H, T, D = q.shape
        if prefill:  # positions are 0..T-1: causal over the first T slots
            k, v = k[:, :, :T], v[:, :, :T]
            mask = None
        else:  # slot s is visible to the query at position p when s ≤ p
            mask = self.slots[None, :] <= positions[:, None]  # (T, S)
        if self.attention == "sdpa" or (self.attention == "auto" and prefill):
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=prefill,
                                                  enable_gqa=self.H != self.Hkv)
        G = H // self.Hkv  # query heads per KV head, grouped without copying K and V
        qg = q.reshape(B, self.Hkv, G * T, D)  # heads h = kv·G + g, as repeat_interleave pairs them
        scores = (qg @ k.transpose(-1, -2)).float() / math.sqrt(D)  # (B, Hkv, G·T, S')
        S = k.shape[2]
        if prefill:
            mask = torch.ones(T, S, dtype=torch.bool, device=q.device).tril()
        scores = scores.view(B, self.Hkv, G, T, S).masked_fill(~mask, float("-inf"))
        probs = torch.softmax(scores, dim=-1).to(q.dtype).view(B, self.Hkv, G * T, S)
        return (probs @ v).view(B, H, T, D)

    def forward(self, tokens: torch.Tensor, positions: torch.Tensor, prefill: bool = False) -> torch.Tensor:
        B, T = tokens.shape
        H, Hkv, D = self.H, self.Hkv, self.D
        x = F.embedding(tokens, self.embed)  # (B, T, C)
        cos, sin = self.cos[positions], self.sin[positions]  # (T, D)
        for i, layer in enumerate(self.layers):
            h = rms_norm(x, layer.norm1, self.eps)  # (B, T, C)
            qkv = F.linear(h, layer.w_qkv, layer.b_qkv)  # (B, T, (H + 2·Hkv)·D)
            q, k, v = qkv.split([H * D, Hkv * D, Hkv * D], dim=-1)
            q = q.view(B, T, H, D)
            k = k.view(B, T, Hkv, D)
            if layer.q_norm is not None:
                q, k = rms_norm(q, layer.q_norm, self.eps), rms_norm(k, layer.k_norm, self.eps)
            q, k = q.transpose(1, 2), k.transpose(1, 2)  # (B, H|Hkv, T, D)
            v = v.view(B, T, Hkv, D).transpose(1, 2)  # (B, Hkv, T, D)
            q = q * cos + rotate_half(q) * sin
            k = k * cos + rotate_half(k) * sin
            k_cache, v_cache = self.k_cache[i], self.v_cache[i]  # (B, Hkv, S, D)
            k_cache[:, :, positions] = k
            v_cache[:, :, positions] = v
            a = self.attend(q, k_cache, v_cache, positions, prefill)  # (B, H, T, D)
            x = x + F.linear(a.transpose(1, 2).reshape(B, T, H * D), layer.w_o)
            h = rms_norm(x, layer.norm2, self.eps)
            gate, up = F.linear(h, layer.w_gate_up).chunk(2, dim=-1)  # (B, T, F) each
            x = x + F.linear(F.silu(gate) * up, layer.w_down)
        h = rms_norm(x[:, -1], self.norm, self.eps)  # (B, C)
        return F.linear(h, self.head)  # (B, V)


def decode_step(model: StaticCacheModel, token: torch.Tensor, position: torch.Tensor) -> torch.Tensor:
    """One greedy step: token (B, 1) at position (1) → next token (B, 1)."""
    return model(token, position).argmax(-1, keepdim=True)


def random_params(cfg: dict, dtype: torch.dtype, device: str, seed: int = 0, std: float = 0.02) -> dict:
    """HF-named random parameters: N(0, std) matrices, RMSNorm weights 1 + N(0, 0.1), biases N(0, 0.1)."""
    C, V, F_ = cfg["hidden_size"], cfg["vocab_size"], cfg["intermediate_size"]
    H, Hkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    D = torch_reference.head_dim(cfg)
    gen = torch.Generator(device=device).manual_seed(seed)

    def normal(*shape, scale=std, shift=0.0):
        return (shift + scale * torch.randn(*shape, generator=gen, device=device)).to(dtype)

    p = {"model.embed_tokens.weight": normal(V, C), "model.norm.weight": normal(C, scale=0.1, shift=1.0)}
    for i in range(cfg["num_hidden_layers"]):
        pre = f"model.layers.{i}."
        p.update({pre + "input_layernorm.weight": normal(C, scale=0.1, shift=1.0),
                  pre + "post_attention_layernorm.weight": normal(C, scale=0.1, shift=1.0),
                  pre + "self_attn.q_proj.weight": normal(H * D, C), pre + "self_attn.k_proj.weight": normal(Hkv * D, C),
                  pre + "self_attn.v_proj.weight": normal(Hkv * D, C), pre + "self_attn.o_proj.weight": normal(C, H * D),
                  pre + "mlp.gate_proj.weight": normal(F_, C), pre + "mlp.up_proj.weight": normal(F_, C),
                  pre + "mlp.down_proj.weight": normal(C, F_)})
        if cfg["model_type"] == "qwen2":
            for n, rows in (("q", H * D), ("k", Hkv * D), ("v", Hkv * D)):
                p[pre + f"self_attn.{n}_proj.bias"] = normal(rows, scale=0.1)
        if cfg["model_type"] == "qwen3":
            p[pre + "self_attn.q_norm.weight"] = normal(D, scale=0.1, shift=1.0)
            p[pre + "self_attn.k_norm.weight"] = normal(D, scale=0.1, shift=1.0)
    if not cfg.get("tie_word_embeddings", False):
        p["lm_head.weight"] = normal(V, C)
    return p
