"""PyTorch FP32 reference of the operator alignment: runs one case folder written by
generate.py with torch, returning its outputs and input gradients (the files microllm
writes, as arrays).

Each operator is the plain PyTorch sequence a Hugging Face model runs, fused operators
unfused: RMSNorm and RoPE come from tools/alignment/torch_reference.py (the reference of the
model alignment: LlamaRMSNorm with F32 statistics, rotate-half RoPE with F32 angles);
add_rms_norm is `s = x + residual` then that RMSNorm; SwiGLU is F.silu(gate) * up;
attention is written out (repeat_interleave K and V, Q·Kᵀ/sqrt(D), causal mask, F32
softmax, ·V). Backward: torch.autograd.grad with the case's upstream gradients.

TF32 is switched off, so CUDA matmuls run in full FP32.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import torch_reference  # noqa: E402  (the model alignment's explicit PyTorch reference)


def fp32_only() -> None:
    """Full FP32 on CUDA: no TF32 in matmuls or convolutions."""
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False


def rope(x: torch.Tensor, positions: torch.Tensor, theta: float) -> torch.Tensor:
    """x (B, H, T, D), positions (T): HF rotary embedding with F32 angles (F64 for F64 x:
    the exact answer)."""
    D = x.shape[-1]
    if x.dtype == torch.float64:
        inv_freq = 1.0 / theta ** (torch.arange(0, D, 2, dtype=torch.float64, device=x.device) / D)
    else:
        inv_freq = torch_reference.rope_inv_freq({"head_dim": D, "rope_theta": theta}).to(x.device)
    freqs = positions.to(inv_freq.dtype)[:, None] * inv_freq[None, :]  # (T, D/2)
    emb = torch.cat((freqs, freqs), dim=-1)  # (T, D)
    return x * emb.cos() + torch_reference.rotate_half(x) * emb.sin()


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, scale) -> torch.Tensor:
    """q (B, H, T, D), k and v (B, Hkv, S, D); queries are the last T of the S positions."""
    H, T, D = q.shape[1], q.shape[2], q.shape[3]
    Hkv, S = k.shape[1], k.shape[2]
    k = k.repeat_interleave(H // Hkv, dim=1)  # (B, H, S, D)
    v = v.repeat_interleave(H // Hkv, dim=1)
    scores = torch.matmul(q, k.transpose(-1, -2)) * (scale if scale is not None else 1.0 / math.sqrt(D))
    if causal:  # query i (position S-T+i) sees keys 0..S-T+i
        q_pos = torch.arange(S - T, S, device=q.device)
        k_pos = torch.arange(S, device=q.device)
        scores = scores.masked_fill(k_pos[None, :] > q_pos[:, None], float("-inf"))
    return torch.matmul(torch.softmax(scores, dim=-1), v)  # (B, H, T, D)


def run_op(op: str, t: dict, a: dict) -> dict:
    """The named outputs of microllm operator `op` on tensors t with arguments a."""
    if op == "linear":
        return {"out": F.linear(t["x"], t["weight"], t.get("bias"))}
    if op == "rms_norm":
        return {"out": torch_reference.rms_norm(t["x"], t["weight"], a["eps"])}
    if op == "add_rms_norm":
        s = t["x"] + t["residual"]
        return {"out": torch_reference.rms_norm(s, t["weight"], a["eps"]), "sum": s}
    if op == "silu":
        return {"out": F.silu(t["x"])}
    if op == "swiglu":
        return {"out": F.silu(t["gate"]) * t["up"]}
    if op == "softmax":
        return {"out": torch.softmax(t["x"], a.get("dim", -1))}
    if op == "rope":
        return {"out": rope(t["x"], t["positions"], a["theta"])}
    if op == "attention":
        return {"out": attention(t["q"], t["k"], t["v"], a.get("causal", True), a.get("scale"))}
    if op == "embedding":
        return {"out": F.embedding(t["ids"], t["weight"])}
    if op == "cross_entropy":
        return {"out": F.cross_entropy(t["logits"], t["targets"], ignore_index=a.get("ignore_index", -100))}
    raise ValueError(f"the PyTorch reference has no operator '{op}'")


def run_case(case_dir: Path, device: str, dtype: str = "f32") -> dict:
    """Runs case_dir on the torch device in F32 (or F64: the exact answer to compare the F32
    reference with). Returns {file stem: NumPy array} for every output (out, sum, ...) and, when
    the case carries upstream gradients, grad_<input> for every input that requires one."""
    floating = {"f32": torch.float32, "f64": torch.float64}[dtype]
    spec = json.loads((case_dir / "case.json").read_text())
    leaves, grad_names = {}, []
    for inp in spec["inputs"]:
        if inp.get("view"):
            raise ValueError(f"{case_dir}: view transforms are not used by the alignment cases")
        value = torch.from_numpy(np.load(case_dir / f"{inp['name']}.npy")).to(device)
        if value.is_floating_point():
            value = value.to(floating).requires_grad_(inp.get("requires_grad", False))
        else:
            value = value.to(torch.int64)
        leaves[inp["name"]] = value
        if value.requires_grad:
            grad_names.append(inp["name"])
    outputs = run_op(spec["op"], leaves, spec.get("args", {}))
    result = {name: value.detach().to("cpu").numpy() for name, value in outputs.items()}
    roots, grads = [], []
    for name, value in outputs.items():
        g = case_dir / ("grad_output.npy" if name == "out" else f"grad_output_{name}.npy")
        if g.exists() and grad_names:
            roots.append(value)
            grads.append(torch.from_numpy(np.load(g)).to(device=device, dtype=value.dtype))
    if roots:
        got = torch.autograd.grad(roots, [leaves[n] for n in grad_names], grads, allow_unused=True)
        for name, g in zip(grad_names, got):
            result[f"grad_{name}"] = (torch.zeros_like(leaves[name]) if g is None else g).detach().to("cpu").numpy()
    return result
