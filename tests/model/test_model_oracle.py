"""The transformer against an explicit PyTorch implementation of the same architecture.

For a tiny model of each family (qwen2 with q/k/v biases, llama with llama3 RoPE scaling
and an untied LM head, qwen3 with QK-norm and head_dim ≠ C/H), microllm_model_runner
writes its random parameters, logits, loss, every parameter gradient and every named
intermediate; this file rebuilds the model in torch from the parameters with
tools/alignment/torch_reference.py (written from the Hugging Face modeling code's
equations, since Debian's torch 1.13 has no transformers) and compares all of them (SPEC §6: F32 logits ≤ 1e-4, gradients ≤ 1e-4
relative to the largest element; F64 far tighter).
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools" / "alignment"))
import torch_reference  # noqa: E402  (the explicit PyTorch model, shared with the alignment tool)

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


def reference_forward(cfg, p, ids, dtype):
    """Logits and named intermediates of the explicit PyTorch model (tools/alignment)."""
    values = {}
    logits = torch_reference.forward(cfg, p, ids, dtype, observe=values.__setitem__)
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
