"""The `microllm` command line end to end: inspect, tokenize, train, resume, eval, forward,
and one clear error line with a non-zero exit for bad input.

Run by CTest (label cpu) with MICROLLM_CLI pointing at the built binary. On the GPU machine,
MICROLLM_CLI_DEVICE=cuda runs train, resume, eval and forward on the GPU.
"""

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

CLI = os.environ.get("MICROLLM_CLI")
DEVICE = os.environ.get("MICROLLM_CLI_DEVICE", "cpu")
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "configs"


def run(*args, ok=True):
    assert CLI, "MICROLLM_CLI is not set"
    proc = subprocess.run([CLI, *map(str, args)], capture_output=True, text=True, timeout=600)
    if ok:
        assert proc.returncode == 0, proc.stderr
    return proc


def assert_one_line_error(proc, *fragments):
    assert proc.returncode != 0
    lines = [l for l in proc.stderr.splitlines() if l.strip()]
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("microllm: error:"), lines[0]
    for f in fragments:
        assert f in lines[0], (f, lines[0])


def bytes_to_unicode():
    """GPT-2's byte → printable character map (the ByteLevel alphabet)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


def byte_tokenizer(folder: Path) -> Path:
    """A byte-level BPE tokenizer.json with the 256 byte tokens, one merge and one special token."""
    alphabet = bytes_to_unicode()
    vocab = {alphabet[b]: b for b in range(256)}
    vocab["th"] = 256
    tok = {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [{"id": 257, "content": "<|endoftext|>", "single_word": False, "lstrip": False,
                          "rstrip": False, "normalized": False, "special": True}],
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
        "post_processor": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True},
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": ["t h"]},
    }
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "tokenizer.json").write_text(json.dumps(tok))
    return folder


def test_inspect_counts_and_json():
    out = run("inspect", "--config", FIXTURES / "qwen2.5-0.5b").stdout
    assert "494,032,768" in out
    out = run("inspect", "--config", FIXTURES / "deepseek-r1-distill-qwen-1.5b" / "config.json").stdout
    assert "1,777,088,000" in out
    j = json.loads(run("inspect", "--config", FIXTURES / "qwen3-0.6b", "--json").stdout)
    assert j["parameters"] == 596049920 and j["kv_cache_bytes_per_token"]["bf16"] == 2 * 28 * 8 * 128 * 2


def test_bad_input_is_one_error_line(tmp_path):
    assert_one_line_error(run("inspect", "--config", tmp_path / "missing.json", ok=False), "cannot open")
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"model_type": "gpt_neox"}))
    assert_one_line_error(run("inspect", "--config", bad, ok=False), "model_type 'gpt_neox'")
    assert run("train", "--config", bad, "--data", bad, "--dtype", "fp8", ok=False).returncode != 0


def test_tokenize_train_resume_eval_forward(tmp_path):
    tokenizer = byte_tokenizer(tmp_path / "tok")
    text = tmp_path / "a.txt"
    text.write_text("the cat sat on the mat. " * 200)
    data = tmp_path / "train.bin"
    out = run("tokenize", "--tokenizer", tokenizer, "--out", data, "--separator", "<|endoftext|>", text).stdout
    assert "vocabulary 258" in out
    manifest = json.loads((tmp_path / "train.bin.json").read_text())
    ids = np.fromfile(data, dtype="<u4")
    assert manifest["count"] == ids.size and manifest["vocab_size"] == 258
    assert ids[-1] == 257 and (ids == 256).sum() == 400  # "th" merged in every "the"

    config = tmp_path / "config.json"
    config.write_text(json.dumps({"model_type": "llama", "vocab_size": 258, "hidden_size": 32,
                                  "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
                                  "num_key_value_heads": 2, "tie_word_embeddings": False}))
    run_dir = tmp_path / "run"
    common = ["--data", data, "--batch", 4, "--seq", 32, "--lr", 1e-2, "--seed", 3, "--log-every", 5,
              "--device", DEVICE]
    metrics = tmp_path / "metrics.jsonl"
    log = run("train", "--config", config, "--steps", 20, "--val", data, "--out", run_dir, "--metrics", metrics,
              *common).stdout
    logged = {int(l.split()[0]): float(l.split()[1]) for l in log.splitlines() if l.strip() and l.split()[0].isdigit()}
    losses = list(logged.values())
    assert losses[-1] < losses[0] - 1.0, log  # a repetitive text is learned quickly
    assert (run_dir / "model.safetensors").exists() and (run_dir / "checkpoint" / "trainer_state.json").exists()
    assert json.loads((run_dir / "config.json").read_text())["torch_dtype"] == "float32"  # F32 weights
    # --metrics: every step's loss (the printed ones agree to the printed digits) and the final validation.
    lines = [json.loads(l) for l in metrics.read_text().splitlines()]
    steps = [m for m in lines if "loss" in m]
    assert [m["step"] for m in steps] == list(range(1, 21))
    for m in steps:
        if m["step"] in logged:
            assert round(m["loss"], 4) == pytest.approx(logged[m["step"]], abs=1e-4)
    assert lines[-1]["step"] == 20 and lines[-1]["final"] is True and lines[-1]["val_loss"] > 0
    log = run("train", "--resume", run_dir, "--steps", 25, "--metrics", metrics, *common).stdout
    assert "resumed from" in log and "at step 20" in log
    lines = [json.loads(l) for l in metrics.read_text().splitlines()]  # appended, not replaced
    assert [m["step"] for m in lines if "loss" in m] == list(range(1, 26))

    j = json.loads(run("eval", "--model", run_dir, "--data", data, "--seq", 32, "--json", "--device", DEVICE).stdout)
    assert j["perplexity"] == pytest.approx(np.exp(j["loss"]))
    assert j["data_sha256"] == manifest["sha256"]

    np.save(tmp_path / "ids.npy", ids[:64].astype(np.int64).reshape(2, 32))
    out = run("forward", "--model", run_dir, "--ids", tmp_path / "ids.npy", "--out", tmp_path / "logits.npy", "--loss",
              "--device", DEVICE).stdout
    logits = np.load(tmp_path / "logits.npy")
    assert logits.shape == (2, 32, 258) and logits.dtype == np.float32 and np.isfinite(logits).all()
    assert "loss" in out

    # A model whose vocabulary is smaller than the token file's ids is refused up front.
    small = tmp_path / "small.json"
    small.write_text(json.dumps(dict(json.loads(config.read_text()), vocab_size=100)))
    assert_one_line_error(run("train", "--config", small, "--steps", 1, "--data", data, ok=False),
                          "outside the model's vocabulary of 100")


def test_train_kernel_choices(tmp_path):
    """--optimizer-kernels fused gives the reference optimizer's losses bit for bit (the fused
    AdamW keeps its bits), so does --recompute (the same gradients), --attention reference is what auto picks on the CPU, and the flash
    kernel, which runs on CUDA only, is refused with one error line."""
    tokenizer = byte_tokenizer(tmp_path / "tok")
    text = tmp_path / "a.txt"
    text.write_text("a rose is a rose is a rose. " * 100)
    data = tmp_path / "train.bin"
    run("tokenize", "--tokenizer", tokenizer, "--out", data, "--separator", "<|endoftext|>", text)
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"model_type": "qwen2", "vocab_size": 258, "hidden_size": 32,
                                  "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
                                  "num_key_value_heads": 2, "tie_word_embeddings": True}))
    common = ["--config", config, "--data", data, "--batch", 2, "--seq", 16, "--lr", 3e-3, "--seed", 5,
              "--steps", 6, "--grad-clip", 0.5, "--device", DEVICE]

    def losses(*extra):
        metrics = tmp_path / ("m" + "".join(str(e) for e in extra) + ".jsonl")
        run("train", *common, "--metrics", metrics, *extra)
        return [json.loads(l)["loss"] for l in metrics.read_text().splitlines() if "loss" in json.loads(l)]

    reference = losses("--optimizer-kernels", "reference")
    assert len(reference) == 6
    assert losses("--optimizer-kernels", "fused") == reference
    assert losses("--recompute") == reference  # recomputed layers: the same gradients
    if DEVICE == "cpu":
        assert losses("--attention", "reference") == losses("--attention", "auto")
        proc = run("train", *common, "--attention", "flash", ok=False)
        assert_one_line_error(proc, "flash")
    bad = run("train", *common, "--optimizer-kernels", "fast", ok=False)  # the option parser's error
    assert bad.returncode != 0 and "--optimizer-kernels: fast not in {auto,fused,reference}" in bad.stderr
