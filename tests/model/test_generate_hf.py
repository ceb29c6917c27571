"""`microllm generate` against Hugging Face `generate` on the committed model fixtures.

Each folder of tests/fixtures/models/ holds a tiny model saved by transformers and the
greedy outputs of transformers' `generate` for it (expected.json, written on the GPU machine
by tools/hf/make_generate_fixtures.py). tools/hf/compare_generate.py runs `microllm generate
--json` on the CPU in F32 and requires the same ids for every prompt.

The fixture set is explicit (FIXTURES): before any fixture is committed the fixture tests
skip with a message; once one is there, a missing one fails. The comparison tool itself is
tested against a stand-in CLI that answers from expected.json, so that a wrong id, a missing
output line or a crash is seen to fail the comparison.

Run by CTest (label cpu) with MICROLLM_CLI pointing at the built microllm binary.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
MODELS = REPO / "tests" / "fixtures" / "models"
COMPARE = REPO / "tools" / "hf" / "compare_generate.py"
CLI = os.environ.get("MICROLLM_CLI")
FIXTURES = ["llama-random", "llama-trained", "qwen2-random", "qwen2-trained", "qwen3-random",
            "qwen3-trained"]


def committed(models: Path = MODELS) -> list[str]:
    """Names of the fixture folders (those holding expected.json)."""
    if not models.is_dir():
        return []
    return sorted(p.name for p in models.iterdir() if (p / "expected.json").is_file())


def missing_reason(name: str, models: Path = MODELS) -> str | None:
    """None when fixture `name` is there; the skip message while no fixture is committed at all.
    Once any fixture exists, a missing one is an error (raised), never a skip."""
    present = committed(models)
    if not present:
        return (f"{models} has no fixtures yet (tools/hf/make_generate_fixtures.py writes them on "
                "the GPU machine; scripts/gpu/generate_fixtures.sh)")
    if name not in present:
        raise AssertionError(f"fixture {name} is missing from {models} (present: {present})")
    return None


def compare(*args, env=None):
    return subprocess.run([sys.executable, str(COMPARE), *map(str, args)], capture_output=True,
                          text=True, timeout=900, env=env)


# ---- the committed fixtures -------------------------------------------------------------


@pytest.mark.parametrize("name", FIXTURES)
def test_generate_equals_hf_in_f32_on_cpu(name, tmp_path):
    reason = missing_reason(name)
    if reason:
        pytest.skip(reason)
    assert CLI, "MICROLLM_CLI is not set"
    out = tmp_path / "summary.json"
    proc = compare(MODELS / name, "--cli", CLI, "--device", "cpu", "--dtype", "f32", "--out", out)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    summary = json.loads(out.read_text())
    assert summary["pass"] and len(summary["fixtures"]) == 1
    assert all(p["equal"] for p in summary["fixtures"][0]["prompts"])


def test_every_committed_fixture_is_in_the_list():
    extra = sorted(set(committed()) - set(FIXTURES))
    assert not extra, f"fixtures {extra} are not in FIXTURES, so no test runs them"


def test_no_fixtures_skip_but_one_missing_fixture_fails(tmp_path):
    assert "has no fixtures yet" in missing_reason("qwen2-random", tmp_path / "absent")
    (tmp_path / "README.md").write_text("not a fixture")
    assert "has no fixtures yet" in missing_reason("qwen2-random", tmp_path)
    (tmp_path / "qwen2-random").mkdir()
    (tmp_path / "qwen2-random" / "expected.json").write_text("{}")
    assert missing_reason("qwen2-random", tmp_path) is None
    with pytest.raises(AssertionError, match="fixture llama-trained is missing"):
        missing_reason("llama-trained", tmp_path)


def test_fixture_maker_self_check():
    # make_generate_fixtures.py's parts that need no transformers: shapes and parameter counts
    # (derived by hand inside), corpus cutting, the training loop on a toy model, prompt choice,
    # expected.json round trip through compare_generate's reader.
    proc = subprocess.run([sys.executable, str(REPO / "tools" / "hf" / "make_generate_fixtures.py"),
                           "--self-check"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "self-check passed" in proc.stdout


# ---- the comparison tool, against a stand-in CLI ----------------------------------------

FAKE_CLI = r'''
import json, os, sys
argv = sys.argv[1:]
with open(os.environ["FAKE_LOG"], "a") as f:
    f.write(json.dumps(argv) + "\n")
mode = os.environ.get("FAKE_MODE", "exact")
if mode == "crash":
    sys.stderr.write("microllm: error: generate: out of luck\n")
    sys.exit(3)
opt = {argv[i]: argv[i + 1] for i in range(1, len(argv) - 1) if argv[i].startswith("--")}
doc = json.load(open(os.path.join(opt["--model"], "expected.json")))
key = "hf_ids" if opt["--dtype"] == "f32" else "hf_bf16_ids"
n = int(opt["--max-new-tokens"])
prompts = [json.loads(l)["prompt_ids"] for l in open(opt["--prompts"]) if l.strip()]
for index, prompt in enumerate(prompts):
    for i, p in enumerate(doc["prompts"]):
        e, k = p[key], len(prompt) - len(p["prompt_ids"])
        if k >= 0 and prompt == p["prompt_ids"] + e[:k]:
            break
    else:
        sys.exit("fake: unknown prompt")
    ids = e[k:k + n]
    if mode.startswith("flip:"):  # flip:PROMPT:POSITION changes HF's token there
        _, fi, fpos = mode.split(":")
        if i == int(fi) and k <= int(fpos) < k + len(ids):
            ids[int(fpos) - k] += 1
    if mode == "short" and index == len(prompts) - 1:
        break
    print(json.dumps({"index": index, "prompt_ids": prompt, "ids": ids, "text": "",
                      "finish_reason": "stop" if ids and ids[-1] == doc["eos_token_id"] else "length"}))
'''


def fake_fixture(folder: Path) -> Path:
    folder.mkdir(parents=True)
    doc = {"schema": "microllm-generate-fixture-v1", "family": "qwen2", "kind": "random",
           "max_new_tokens": 6, "eos_token_id": 9, "prompts": [
               {"prompt_ids": [1], "hf_ids": [4, 5, 6, 7, 8, 1], "hf_bf16_ids": [4, 5, 6, 7, 8, 2],
                "hf_margins": [0.5, 0.4, 0.3, 0.2, 0.1, 0.05]},
               {"prompt_ids": [2, 3, 4], "hf_ids": [3, 9], "hf_bf16_ids": [3, 9]},
               {"prompt_ids": [5, 6, 7, 8, 1, 2], "hf_ids": [2] * 6, "hf_bf16_ids": [2] * 6}]}
    (folder / "expected.json").write_text(json.dumps(doc))
    return folder


@pytest.fixture
def fake(tmp_path):
    cli = tmp_path / "microllm"
    cli.write_text(f"#!{sys.executable}\n" + FAKE_CLI)
    cli.chmod(0o755)
    folder = fake_fixture(tmp_path / "models" / "qwen2-random")
    log = tmp_path / "argv.log"

    def run(mode, *extra):
        env = dict(os.environ, FAKE_MODE=mode, FAKE_LOG=str(log))
        out = tmp_path / f"summary-{len(list(tmp_path.glob('summary-*')))}.json"
        proc = compare(folder.parent, "--cli", cli, "--out", out, *extra, env=env)
        summary = json.loads(out.read_text()) if out.exists() else None
        return proc, summary
    run.log = log
    return run


def test_equal_ids_pass_and_the_command_line_is_the_documented_one(fake):
    proc, summary = fake("exact")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert summary["pass"]
    assert [p["equal"] for p in summary["fixtures"][0]["prompts"]] == [True, True, True]
    assert summary["fixtures"][0]["prompts"][1]["hf_finish"] == "stop"
    argv = json.loads(fake.log.read_text().splitlines()[0])
    assert argv[0] == "generate"
    for flag, value in (("--max-new-tokens", "6"), ("--temperature", "0"), ("--device", "cpu"),
                        ("--dtype", "f32")):
        assert argv[argv.index(flag) + 1] == value
    assert "--json" in argv and "--prompts" in argv


def test_one_different_id_fails_f32_and_names_the_position(fake):
    proc, summary = fake("flip:0:3")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    prompt = summary["fixtures"][0]["prompts"][0]
    assert not summary["pass"] and not prompt["equal"]
    assert prompt["first_divergence"] == {"position": 3, "expected": 7, "got": 8, "hf_margin": 0.2}
    assert "prompt 0: first divergence at 3" in proc.stdout


def test_missing_output_and_crash_are_setup_failures(fake):
    proc, summary = fake("short")
    assert proc.returncode == 2 and "printed 2 JSON objects for 3 prompts" in proc.stdout
    proc, summary = fake("crash")
    assert proc.returncode == 2 and "out of luck" in proc.stdout
    assert not summary["pass"]


def test_bf16_passes_with_a_late_divergence_and_fails_with_an_early_one(fake):
    # HF's BF16 path is compared (not hf_ids): the stand-in follows hf_bf16_ids exactly.
    proc, summary = fake("exact", "--dtype", "bf16")
    assert proc.returncode == 0, proc.stdout
    forced = summary["fixtures"][0]["teacher_forced"]
    assert forced == {"positions": 14, "agree": 14, "fraction": 1.0, "per_prompt": [
        {"index": 0, "agree": 6, "positions": 6}, {"index": 1, "agree": 2, "positions": 2},
        {"index": 2, "agree": 6, "positions": 6}]}
    # A flip at position 4 of prompt 0 (6 tokens): 4 leading tokens agree; one position of 14
    # differs, free-running and teacher-forced (13/14 = 0.929).
    proc, summary = fake("flip:0:4", "--dtype", "bf16", "--bf16-prefix", "3",
                         "--bf16-min-teacher-forced", "0.9")
    assert proc.returncode == 0, proc.stdout
    fx = summary["fixtures"][0]
    assert fx["prompts"][0]["prefix"] == 4
    assert fx["prefix_fraction"] == pytest.approx((4 + 2 + 6) / 14)
    assert fx["positional_fraction"] == pytest.approx(13 / 14)
    assert fx["teacher_forced"]["agree"] == 13
    # The default criterion is teacher-forced top-1 agreement ≥ 0.95: 13/14 fails it.
    proc, summary = fake("flip:0:4", "--dtype", "bf16")
    assert proc.returncode == 1
    # An equal prefix is required only when asked for.
    proc, summary = fake("flip:0:1", "--dtype", "bf16", "--bf16-prefix", "3",
                         "--bf16-min-teacher-forced", "0.9")
    assert proc.returncode == 1
    proc, summary = fake("flip:0:4", "--dtype", "bf16", "--bf16-prefix", "3",
                         "--bf16-min-teacher-forced", "0.99")
    assert proc.returncode == 1


def test_a_malformed_fixture_is_refused(tmp_path):
    folder = tmp_path / "bad"
    folder.mkdir()
    (folder / "expected.json").write_text(json.dumps({"schema": "microllm-generate-fixture-v1",
                                                      "max_new_tokens": 4, "prompts": [{"prompt_ids": []}]}))
    proc = compare(folder, "--cli", "/nonexistent/microllm")
    assert proc.returncode == 2
    assert "prompts[0].prompt_ids is empty" in proc.stdout
    assert "prompts[0].hf_ids must be a list of token ids" in proc.stdout
