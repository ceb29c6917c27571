"""`microllm generate` and `microllm chat` end to end on the CPU.

The oracle is the explicit PyTorch model (tools/alignment/torch_reference.py, written from the
Hugging Face modeling equations): greedy generation by a full forward over the whole sequence
at every step, no cache. microllm's cached, batched, chunked engine must produce the same ids
(F32) for a tiny random model of each family (qwen2 with q/k/v biases and a tied head, llama
untied with llama3 RoPE scaling, qwen3 with QK-norm and head_dim ≠ C/H), and the same
logprobs within the F32 contract. Also: a batch equals its prompts run alone (greedy and
seeded sampling), stop strings, EOS, chat's script mode, and one clear error for each bad
input.

Run by CTest (label cpu) with MICROLLM_CLI pointing at the built binary; MICROLLM_CLI_DEVICE
(cuda on the GPU machine) picks the device.
"""

import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tools" / "alignment"))
sys.path.insert(0, str(REPO / "tests" / "model"))
sys.path.insert(0, str(REPO / "tests" / "cli"))
import torch_reference  # noqa: E402
from test_model_oracle import CONFIGS  # noqa: E402  (the three tiny family configs)
from test_cli import byte_tokenizer, assert_one_line_error  # noqa: E402

CLI = os.environ.get("MICROLLM_CLI")
DEVICE = os.environ.get("MICROLLM_CLI_DEVICE", "cpu")
CHATML = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content']"
          " + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}"
          "{% endif %}")


def run(*args, ok=True, stdin=None):
    assert CLI, "MICROLLM_CLI is not set"
    proc = subprocess.run([CLI, *map(str, args)], capture_output=True, text=True, timeout=600, input=stdin)
    if ok:
        assert proc.returncode == 0, proc.stderr
    return proc


def write_safetensors(path: Path, tensors: dict) -> None:
    header, blobs, offset = {}, [], 0
    for name, array in tensors.items():
        data = np.ascontiguousarray(array, dtype=np.float32).tobytes()
        header[name] = {"dtype": "F32", "shape": list(array.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    path.write_bytes(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def parameter_shapes(cfg: dict) -> dict:
    C, F, V = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    D = torch_reference.head_dim(cfg)
    H, Hkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    shapes = {"model.embed_tokens.weight": (V, C), "model.norm.weight": (C,)}
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        shapes.update({p + "input_layernorm.weight": (C,), p + "post_attention_layernorm.weight": (C,),
                       p + "self_attn.q_proj.weight": (H * D, C), p + "self_attn.k_proj.weight": (Hkv * D, C),
                       p + "self_attn.v_proj.weight": (Hkv * D, C), p + "self_attn.o_proj.weight": (C, H * D),
                       p + "mlp.gate_proj.weight": (F, C), p + "mlp.up_proj.weight": (F, C),
                       p + "mlp.down_proj.weight": (C, F)})
        if cfg["model_type"] == "qwen2":
            shapes.update({p + "self_attn.q_proj.bias": (H * D,), p + "self_attn.k_proj.bias": (Hkv * D,),
                           p + "self_attn.v_proj.bias": (Hkv * D,)})
        if cfg["model_type"] == "qwen3":
            shapes.update({p + "self_attn.q_norm.weight": (D,), p + "self_attn.k_norm.weight": (D,)})
    if not cfg["tie_word_embeddings"]:
        shapes["lm_head.weight"] = (V, C)
    return shapes


def make_model(folder: Path, family: str, seed: int = 0, vocab: int | None = None, eos=None) -> tuple:
    """A random model folder (std 0.3 so greedy paths vary); returns (cfg, params as torch)."""
    cfg = dict(CONFIGS[family])
    if vocab:
        cfg["vocab_size"] = vocab
    cfg["max_position_embeddings"] = 96
    if eos is not None:
        cfg["eos_token_id"] = eos
    rng = np.random.default_rng(seed)
    params = {}
    for name, shape in parameter_shapes(cfg).items():
        if name.endswith("norm.weight"):
            params[name] = 1.0 + 0.1 * rng.standard_normal(shape)
        else:
            params[name] = 0.3 * rng.standard_normal(shape)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(cfg))
    write_safetensors(folder / "model.safetensors", params)
    return cfg, {k: torch.from_numpy(np.asarray(v, dtype=np.float32)) for k, v in params.items()}


def reference_greedy(cfg, params, prompt, max_new, eos=()):
    """Greedy ids, the top-2 logit gap and the chosen log-probability at every step (no cache)."""
    ids, gaps, logprobs = list(prompt), [], []
    with torch.no_grad():
        for _ in range(max_new):
            logits = torch_reference.forward(cfg, params, torch.tensor([ids]), torch.float32)[0, -1]
            top = torch.topk(logits, 2)
            nxt = int(top.indices[0])
            gaps.append(float(top.values[0] - top.values[1]))
            logprobs.append(float(torch.log_softmax(logits.double(), -1)[nxt]))
            ids.append(nxt)
            if nxt in eos:
                break
    return ids[len(prompt):], gaps, logprobs


def generate_json(folder, *args):
    out = run("generate", "--model", folder, "--device", DEVICE, "--json", *args).stdout
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def prompts_file(path: Path, prompts) -> Path:
    path.write_text("".join(json.dumps({"prompt_ids": p}) + "\n" for p in prompts))
    return path


def assert_same_greedy(ours, ref, gaps, what):
    """Equal ids up to the end, or up to a near-tie (top-2 gap < 1e-4) where rounding may pick
    either token; the near-tie must come late enough for the comparison to mean something."""
    for i, (a, b) in enumerate(zip(ours, ref)):
        if a != b:
            assert gaps[i] < 1e-4 and i >= 4, f"{what}: token {i}: {a} != {b} (gap {gaps[i]:.3g})"
            return
    assert len(ours) == len(ref), f"{what}: {len(ours)} tokens, reference {len(ref)}"


@pytest.mark.parametrize("family", sorted(CONFIGS))
def test_greedy_batch_equals_uncached_reference(tmp_path, family):
    cfg, params = make_model(tmp_path / "m", family, seed=1)
    rng = np.random.default_rng(2)
    prompts = [rng.integers(0, cfg["vocab_size"], size=n).tolist() for n in (1, 5, 17, 33)]
    # Chunked prefill (chunk 8 < 17, 33) and block size 5 (not dividing the prompt lengths).
    results = generate_json(tmp_path / "m", "--prompts", prompts_file(tmp_path / "p.jsonl", prompts),
                            "--max-new-tokens", 14, "--temperature", 0, "--prefill-chunk", 8,
                            "--block-size", 5, "--logprobs", 2)
    assert [r["index"] for r in results] == list(range(len(prompts)))
    for r, prompt in zip(results, prompts):
        assert r["prompt_ids"] == prompt
        ref, gaps, ref_logprobs = reference_greedy(cfg, params, prompt, 14)
        assert_same_greedy(r["ids"], ref, gaps, f"{family} prompt of {len(prompt)}")
        assert r["finish_reason"] == "length"
        for tok, want, ours_id, ref_id in zip(r["logprobs"], ref_logprobs, r["ids"], ref):
            if ours_id != ref_id:
                break
            assert abs(tok["logprob"] - want) <= 1e-4, (tok, want)
            assert len(tok["top_logprobs"]) == 2 and tok["top_logprobs"][0]["id"] == ours_id


def test_batch_equals_alone_greedy_and_seeded(tmp_path):
    cfg, _ = make_model(tmp_path / "m", "qwen2", seed=3)
    rng = np.random.default_rng(4)
    prompts = [rng.integers(0, cfg["vocab_size"], size=n).tolist() for n in (3, 11, 7)]
    for sampling in (["--temperature", 0], ["--temperature", 0.9, "--top-k", 20, "--top-p", 0.9, "--seed", 7]):
        together = generate_json(tmp_path / "m", "--prompts", prompts_file(tmp_path / "p.jsonl", prompts),
                                 "--max-new-tokens", 10, *sampling)
        for prompt, batched in zip(prompts, together):
            alone = generate_json(tmp_path / "m", "--prompt-ids", json.dumps(prompt), "--max-new-tokens", 10,
                                  *sampling)[0]
            assert alone["ids"] == batched["ids"], (sampling, prompt)
    # A different seed draws differently somewhere (10 tokens × 3 prompts of a random model).
    a = generate_json(tmp_path / "m", "--prompts", tmp_path / "p.jsonl", "--max-new-tokens", 10,
                      "--temperature", 1.0, "--seed", 1)
    b = generate_json(tmp_path / "m", "--prompts", tmp_path / "p.jsonl", "--max-new-tokens", 10,
                      "--temperature", 1.0, "--seed", 2)
    assert [r["ids"] for r in a] != [r["ids"] for r in b]


def test_no_cuda_graphs_gives_the_same_tokens(tmp_path):
    """--no-cuda-graphs launches decode steps eagerly on CUDA (a no-op on the CPU): the same
    ids and logprobs, sampled and with top logprobs, for a batch that pads to a graph bucket."""
    cfg, _ = make_model(tmp_path / "m", "qwen3", seed=8)
    rng = np.random.default_rng(9)
    prompts = [rng.integers(0, cfg["vocab_size"], size=n).tolist() for n in (4, 9, 2)]
    args = ["--prompts", prompts_file(tmp_path / "p.jsonl", prompts), "--max-new-tokens", 9,
            "--temperature", 0.8, "--top-p", 0.9, "--seed", 3, "--logprobs", 3]
    graphs = generate_json(tmp_path / "m", *args)
    eager = generate_json(tmp_path / "m", *args, "--no-cuda-graphs")
    assert [r["ids"] for r in graphs] == [r["ids"] for r in eager]
    assert [r["logprobs"] for r in graphs] == [r["logprobs"] for r in eager]
    assert all(len(r["ids"]) == 9 for r in graphs)


def test_eos_stops_and_is_returned(tmp_path):
    cfg, params = make_model(tmp_path / "m", "llama", seed=5)
    prompt = [3, 1, 4, 1, 5]
    ref, _, _ = reference_greedy(cfg, params, prompt, 12)
    eos = ref[4]  # the fifth greedy token becomes the EOS: generation ends there, EOS included
    first = ref.index(eos)
    r = generate_json(tmp_path / "m", "--prompt-ids", json.dumps(prompt), "--max-new-tokens", 12,
                      "--temperature", 0, "--stop-token-id", eos)[0]
    assert r["ids"] == ref[:first + 1] and r["finish_reason"] == "stop"
    cfg, params = make_model(tmp_path / "m", "llama", seed=5, eos=eos)
    r = generate_json(tmp_path / "m", "--prompt-ids", json.dumps(prompt), "--max-new-tokens", 12,
                      "--temperature", 0)[0]
    first = ref.index(eos)
    assert r["ids"] == ref[:first + 1] and r["finish_reason"] == "stop"


def test_text_prompt_stop_strings_and_chat(tmp_path):
    folder = tmp_path / "m"
    make_model(folder, "qwen2", seed=6, vocab=258)
    byte_tokenizer(folder)
    (folder / "tokenizer_config.json").write_text(json.dumps({"chat_template": CHATML, "eos_token": "<|endoftext|>"}))
    full = generate_json(folder, "--prompt", "Hello", "--max-new-tokens", 24, "--temperature", 0)[0]
    text = full["text"]
    assert full["ids"] and isinstance(text, str)
    # A stop string taken from the middle of the greedy text: the output ends just before it.
    visible = [i for i in range(2, len(text) - 2) if text[i:i + 2].strip()]
    if visible:
        cut = visible[0]
        stop = text[cut:cut + 2]
        first = text.index(stop)
        r = generate_json(folder, "--prompt", "Hello", "--max-new-tokens", 24, "--temperature", 0, "--stop", stop)[0]
        assert r["text"] == text[:first] and r["finish_reason"] == "stop"
        assert stop not in r["text"]
    # Streaming text mode prints the same text.
    streamed = run("generate", "--model", folder, "--device", DEVICE, "--prompt", "Hello", "--max-new-tokens", 24,
                   "--temperature", 0).stdout
    assert streamed == text + "\n"
    # chat, script mode: one answer line per input line.
    out = run("chat", "--model", folder, "--device", DEVICE, "--max-new-tokens", 6, "--temperature", 0,
              stdin="Hi\nHow are you?\n").stdout
    assert len(out.splitlines()) == 2


def test_bad_input_is_one_clear_error(tmp_path):
    folder = tmp_path / "m"
    cfg, _ = make_model(folder, "qwen2", seed=7)
    V = cfg["vocab_size"]

    def gen(*args):
        return run("generate", "--model", folder, "--device", DEVICE, *args, ok=False)

    assert_one_line_error(run("generate", "--model", tmp_path / "nope", "--prompt-ids", "[1]", ok=False), "nope")
    assert_one_line_error(gen("--prompt-ids", f"[1, {V}]"), str(V), "vocabulary")
    assert_one_line_error(gen("--prompt-ids", json.dumps(list(range(1, 97)))), "context")
    assert_one_line_error(gen("--prompt", "hello"), "tokenizer")
    assert_one_line_error(gen("--prompt-ids", "[1]", "--temperature", -1), "temperature")
    assert_one_line_error(gen("--prompt-ids", "[1]", "--top-p", 1.5), "top_p")
    assert_one_line_error(gen("--prompt-ids", "[1]", "--top-p", 0), "top_p")
    assert_one_line_error(gen("--prompt-ids", "[1]", "--top-k", -2), "top_k")
    assert_one_line_error(gen("--prompt-ids", "[1]", "--min-p", 2), "min_p")
    assert_one_line_error(gen("--prompt-ids", "[1]", "--logprobs", 21), "logprobs")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt_ids": [1, 2]}\n{"prompt_ids": [1, \n')
    assert_one_line_error(gen("--prompts", bad), "bad.jsonl:2")
    bad.write_text('{"prompt_ids": [1, 2]}\n{"text": "x"}\n')
    assert_one_line_error(gen("--prompts", bad), "bad.jsonl:2")
    assert_one_line_error(gen("--prompt-ids", "[1]", "--stop", "x"), "tokenizer")
