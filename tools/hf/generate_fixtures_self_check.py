"""The self-check of tools/hf/make_generate_fixtures.py (`--self-check`): the parts that run
without transformers, tokenizers or a GPU — fixture shapes and parameter counts (derived by
hand), corpus cutting, the training loop on a toy model, prompt choice, expected.json written
and read back through compare_generate's reader, torch_reference on a fixture config."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch

import compare_generate
import make_generate_fixtures as m
import torch_reference


class _Bigram(torch.nn.Module):
    """A stand-in with transformers' call signature: logits from the previous token only."""

    def __init__(self, vocab: int):
        super().__init__()
        self.table = torch.nn.Embedding(vocab, vocab)

    def forward(self, input_ids, labels=None):
        logits = self.table(input_ids)  # (B, T, V)
        loss = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]),
                                                 labels[:, 1:].reshape(-1))
        return SimpleNamespace(loss=loss, logits=logits)


def self_check(args) -> int:
    print("self-check: fixture shapes (parameters, F32 bytes of model.safetensors)")
    for kind in m.KINDS:
        vocab = 1024 if kind == "trained" else args.random_vocab
        hidden = args.hidden if kind == "trained" else args.random_hidden
        for family in m.FAMILIES:
            cfg = m.model_config(family, vocab, hidden, args, vocab - 1, 0.02)
            n = m.parameter_count(cfg)
            print(f"  {family}-{kind:<8} hidden {hidden} head_dim {cfg.get('head_dim') or hidden // args.heads:>3} "
                  f"vocab {vocab}: {n:,} parameters, {4 * n / 1e6:.2f} MB")
            assert 2e5 <= n <= 1e6, (family, kind, n)
    # Counted by hand for qwen2, C=4 V=10 F=6 L=1 H=2 Hkv=1 (D=2): embedding 40; q 16 + k 8 +
    # v 8 + o 16 + biases 4+2+2 = 56; MLP 72; norms 8 → layer 136; final norm 4; tied → 180.
    tiny = SimpleNamespace(intermediate=6, layers=1, heads=2, kv_heads=1, max_positions=16)
    assert m.parameter_count(m.model_config("qwen2", 10, 4, tiny, None, 0.02)) == 180
    # llama adds an untied head (40) and drops the biases (8); qwen3 D=4: q 16→32, k,v 8→16,
    # o 32, norms of q/k 8, no biases: 40 + (32+16+16+32+8 + 72 + 8) + 4 + 0 = 228.
    assert m.parameter_count(m.model_config("llama", 10, 4, tiny, None, 0.02)) == 180 - 8 + 40
    assert m.parameter_count(m.model_config("qwen3", 10, 4, tiny, None, 0.02)) == 228

    with tempfile.TemporaryDirectory() as tmp:
        corpus = Path(tmp) / "corpus.txt"
        corpus.write_text("The first paragraph.\nStill the first.\n\n  \n\nSecond one.\n\n\nThird.<|endoftext|>\n")
        docs = m.read_documents(corpus)
        assert docs == ["The first paragraph.\nStill the first.", "Second one.", "Third."], docs
        assert m.token_stream([[1, 2], [3]], 9) == [1, 2, 9, 3, 9]

        # The training loop on a toy model and a periodic stream: the loss must fall.
        torch.manual_seed(0)
        stream = torch.tensor([3, 1, 4, 1, 5, 9, 2, 6] * 200)
        toy = _Bigram(10)
        small = SimpleNamespace(steps=60, batch=8, seq=16, lr=0.1, warmup_steps=5, seed=0)
        result = m.train(toy, stream, stream[:200], small)
        print(f"  training loop (toy bigram): loss {result['initial_loss']:.3f} → {result['final_loss']:.3f}")
        assert result["final_loss"] < result["initial_loss"] - 1.0, result
        assert m.lr_at(0, 100, 1.0, 10) == 0.1 and abs(m.lr_at(99, 100, 1.0, 10) - 0.1) < 1e-3

        # Prompt choice: a near-tie is skipped; the BF16 prefix rule breaks margin ties.
        margins = {(1,): [0.5, 1e-5], (2,): [0.2, 0.3], (3,): [0.4, 0.4]}
        fake = lambda p: {"ids": [p[0], 7], "margins": margins[tuple(p)]}  # noqa: E731
        fake_bf16 = lambda p: {"ids": [p[0], 8 if p == [2] else 7], "margins": [1, 1]}  # noqa: E731
        cands = iter([("a", [1]), ("b", [2]), ("c", [3])])
        assert m.choose(cands, fake, fake_bf16, 1e-3, 8, 8)["source"] == "c"
        assert m.choose(iter([("a", [1])]), fake, fake_bf16, 1e-3, 8, 8)["source"] == "a"  # best of a bad lot
        assert next(m.random_candidates(50, 17, 0, 49))[1] == next(m.random_candidates(50, 17, 0, 49))[1]
        got = sorted(ids for _, ids in m.corpus_candidates([[1] * 4, [2] * 9, [3] * 5], 5, 0))
        assert got == [[2] * 5, [3] * 5], got  # the 4-token document is too short
        probes = [ids for _, ids in m.eos_probe_candidates([[1] * 7, [2] * 12, [3] * 40], 0, 30)]
        assert probes == [[2] * 9], probes  # 12 tokens less 3; 7 is too short, 40 too long
        assert m.sig(0.123456789) == 0.123457 and m.sig(-12345678.0) == -12345700.0

        # expected.json as written reads back and satisfies the comparison tool.
        entry = m.prompt_entry({"source": "random ids", "prompt": [1, 2, 3],
                              "f32": {"ids": [4, 9], "margins": [0.51234567, 0.2],
                                      "logits_first": torch.tensor([0.1234567, -2.0])},
                              "bf16": {"ids": [4, 5], "margins": [0.5, 0.1]}}, 9, None, True)
        assert entry["hf_finish"] == "stop" and entry["hf_logits_last"] == [0.123457, -2.0]
        doc = {"schema": m.SCHEMA, "name": "qwen2-random", "family": "qwen2", "kind": "random",
               "max_new_tokens": 2, "eos_token_id": 9, "model": {"config": {"a": [1, 2]}},
               "prompts": [entry, dict(entry, prompt_ids=[5])]}
        folder = Path(tmp) / "qwen2-random"
        folder.mkdir()
        (folder / "expected.json").write_text(m.dump_expected(doc))
        assert json.loads((folder / "expected.json").read_text()) == doc
        assert compare_generate.load_fixture(folder)["prompts"][1]["prompt_ids"] == [5]
        lines = (folder / "expected.json").read_text().splitlines()
        assert sum(l.lstrip().startswith('{"source"') for l in lines) == 2  # one line per prompt

        # The independent reference runs on a config written here (the H200 check uses it).
        cfg = m.model_config("qwen3", 16, 8, tiny, None, 0.02)
        params = _random_params(cfg)
        logits = torch_reference.forward(cfg, params, torch.tensor([[1, 2, 3]]), torch.float32)
        assert logits.shape == (1, 3, 16)
    print("self-check passed")
    return 0


def _random_params(cfg: dict[str, Any]) -> dict[str, torch.Tensor]:
    """HF-named random parameters for a config (the self-check's torch_reference run)."""
    C, V, F = cfg["hidden_size"], cfg["vocab_size"], cfg["intermediate_size"]
    H, Hkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    D = cfg.get("head_dim") or C // H
    g = torch.Generator().manual_seed(0)
    r = lambda *s: 0.1 * torch.randn(*s, generator=g)  # noqa: E731
    p = {"model.embed_tokens.weight": r(V, C), "model.norm.weight": 1 + r(C)}
    for i in range(cfg["num_hidden_layers"]):
        pre = f"model.layers.{i}."
        p.update({pre + "input_layernorm.weight": 1 + r(C), pre + "post_attention_layernorm.weight": 1 + r(C),
                  pre + "self_attn.q_proj.weight": r(H * D, C), pre + "self_attn.k_proj.weight": r(Hkv * D, C),
                  pre + "self_attn.v_proj.weight": r(Hkv * D, C), pre + "self_attn.o_proj.weight": r(C, H * D),
                  pre + "self_attn.q_norm.weight": 1 + r(D), pre + "self_attn.k_norm.weight": 1 + r(D),
                  pre + "mlp.gate_proj.weight": r(F, C), pre + "mlp.up_proj.weight": r(F, C),
                  pre + "mlp.down_proj.weight": r(C, F)})
    if not cfg["tie_word_embeddings"]:
        p["lm_head.weight"] = r(V, C)
    return p
