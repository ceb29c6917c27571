"""The default model (models/microllm-brown) and the command line's default-model path.

- The committed folder is the one its training record describes (every file's SHA-256).
- Its identity, as `microllm inspect --model` prints it, equals a Python recomputation from
  the layout in docs/default-model.md ("Identity") and the identity in the training record
  (which two training runs of the same command on the H200 both produced).
- `generate` without --model uses the default model; MICROLLM_MODEL chooses another folder and
  --model beats both; a MICROLLM_MODEL folder that does not exist is one clear error.
- `chat` without --model uses it too and says that it is a base model.
- Greedy generation of the default model equals the uncached PyTorch model
  (tools/alignment/torch_reference.py) on the same BF16 weights widened to F32.

Run by CTest (label cpu) with MICROLLM_CLI pointing at the built binary.
"""

import hashlib
import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tools" / "alignment"))
sys.path.insert(0, str(REPO / "tests" / "cli"))
import torch_reference  # noqa: E402
from test_cli import assert_one_line_error  # noqa: E402
from test_generate import assert_same_greedy, reference_greedy  # noqa: E402

CLI = os.environ.get("MICROLLM_CLI")
MODEL = REPO / "models" / "microllm-brown"
RECORDS = REPO / "bench" / "records" / "default-model"
FIXTURE = REPO / "tests" / "fixtures" / "models" / "qwen2-trained"


def run(*args, env=None, stdin=None, ok=True):
    assert CLI, "MICROLLM_CLI is not set"
    environment = {k: v for k, v in os.environ.items() if k != "MICROLLM_MODEL"}
    environment.update(env or {})
    proc = subprocess.run([CLI, *map(str, args)], capture_output=True, text=True, timeout=600,
                          env=environment, input=stdin)
    if ok:
        assert proc.returncode == 0, proc.stderr
    return proc


def training_record():
    records = sorted(RECORDS.glob("*-train.json"))
    assert records, f"no training record in {RECORDS}"
    return json.loads(records[-1].read_text())


def read_safetensors(path):
    """{name: (dtype, shape, bytes)} of one safetensors file."""
    data = path.read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    header.pop("__metadata__", None)
    base = 8 + n
    return {name: (t["dtype"], t["shape"], data[base + t["data_offsets"][0]:base + t["data_offsets"][1]])
            for name, t in header.items()}


def python_identity(folder):
    """docs/default-model.md "Identity", for a folder whose config.json microllm wrote (so the
    canonical config is the file's JSON without torch_dtype, with sorted keys and no
    whitespace)."""
    def canonical(path, drop=()):
        if not path.exists():
            return b""
        value = json.loads(path.read_text(encoding="utf-8"))
        for key in drop:
            value.pop(key, None)
        return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()

    h = hashlib.sha256(b"microllm-model-identity-v2\n")

    def field(label, data):
        h.update(f"{label} {len(data)}\n".encode() + data + b"\n")

    field("config", canonical(folder / "config.json", drop=("torch_dtype",)))
    field("tokenizer.json", canonical(folder / "tokenizer.json"))
    field("tokenizer_config.json", canonical(folder / "tokenizer_config.json"))
    for name, (dtype, shape, data) in sorted(read_safetensors(folder / "model.safetensors").items()):
        field("tensor", name.encode())
        field("dtype", dtype.encode())
        field("shape", ("[" + ",".join(map(str, shape)) + "]").encode())
        field("data", data)
    return h.hexdigest()


def generate_ids(*args, env=None):
    out = run("generate", "--json", "--max-new-tokens", 24, *args, env=env).stdout
    return [json.loads(line)["ids"] for line in out.splitlines() if line.strip()]


def test_the_folder_is_the_one_its_training_record_describes():
    record = training_record()
    files = {p.name for p in MODEL.iterdir()}
    assert files == set(record["folder"]), (files, set(record["folder"]))
    for name, expected in record["folder"].items():
        data = (MODEL / name).read_bytes()
        assert len(data) == expected["bytes"], name
        assert hashlib.sha256(data).hexdigest() == expected["sha256"], name
    assert record["retrain_identities"] and set(record["retrain_identities"].values()) == {record["identity"]}


def test_identity_equals_a_python_recomputation_and_the_record():
    shown = json.loads(run("inspect", "--model", MODEL, "--json").stdout)
    assert shown["identity"] == python_identity(MODEL)
    assert shown["identity"] == training_record()["identity"]
    assert shown["tokenizer"] is True and shown["parameters"] == 6822144
    text = run("inspect", "--model", MODEL).stdout
    assert f"identity:                 {shown['identity']}" in text


def test_identity_of_a_changed_copy_differs(tmp_path):
    copy = tmp_path / "copy"
    copy.mkdir()
    for p in MODEL.iterdir():
        (copy / p.name).write_bytes(p.read_bytes())
    base = json.loads(run("inspect", "--model", copy, "--json").stdout)["identity"]
    data = bytearray((copy / "model.safetensors").read_bytes())
    data[-1] ^= 1  # the last byte of the data section: one bit of one element
    (copy / "model.safetensors").write_bytes(bytes(data))
    changed = json.loads(run("inspect", "--model", copy, "--json").stdout)["identity"]
    assert changed != base and changed == python_identity(copy)


def test_generate_without_model_uses_the_default_model():
    args = ("--prompt", "The jury said", "--seed", 3)
    default = generate_ids(*args)
    assert default == generate_ids("--model", MODEL, *args)
    assert len(default[0]) >= 1
    # With no --json the text streams; it is English words from the corpus' vocabulary.
    proc = run("generate", "--prompt", "The jury said", "--seed", 3, "--max-new-tokens", 40)
    assert len(proc.stdout.split()) >= 5, proc.stdout


def test_environment_variable_and_flag_choose_the_model():
    args = ("--prompt-ids", "[3, 1, 4, 1, 5]", "--temperature", 0)
    fixture = generate_ids("--model", FIXTURE, *args)
    assert generate_ids(*args, env={"MICROLLM_MODEL": str(FIXTURE)}) == fixture
    default = generate_ids(*args)
    assert default != fixture
    assert generate_ids("--model", MODEL, *args, env={"MICROLLM_MODEL": str(FIXTURE)}) == default
    assert generate_ids(*args, env={"MICROLLM_MODEL": ""}) == default  # empty = unset
    missing = REPO / "no-such-model-folder"
    proc = run("generate", "--prompt", "x", env={"MICROLLM_MODEL": str(missing)}, ok=False)
    assert_one_line_error(proc, "generate", str(missing))


def test_chat_without_model_uses_the_default_and_says_it_is_a_base_model():
    proc = run("chat", "--temperature", 0, "--max-new-tokens", 16, stdin="Tell me about the city.\n")
    assert "base model" in proc.stderr and str(MODEL) in proc.stderr
    assert proc.stdout.strip(), proc.stderr


def test_greedy_generation_equals_the_pytorch_reference():
    cfg = json.loads((MODEL / "config.json").read_text())
    params = {}
    for name, (dtype, shape, data) in read_safetensors(MODEL / "model.safetensors").items():
        assert dtype == "BF16", name
        params[name] = torch.frombuffer(bytearray(data), dtype=torch.bfloat16).reshape(shape).float()
    out = json.loads(run("generate", "--json", "--prompt", "The history of the city",
                         "--temperature", 0, "--repetition-penalty", 1, "--max-new-tokens", 24)
                     .stdout.splitlines()[-1])
    ref, gaps, _ = reference_greedy(cfg, params, out["prompt_ids"], 24, eos=(8189,))
    assert_same_greedy(out["ids"], ref, gaps, "default model, greedy")
