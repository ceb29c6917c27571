"""The model alignment tool end to end on the CPU (tools/alignment/run.py).

The tiny model runs in microllm and in Debian's PyTorch through all four passes and must
pass; then the comparison is shown to fail on each kind of defect it exists to catch
(a changed value, a missing gradient, a changed gradient under a matching loss, a truncated
capture), and the driver's bad-input paths give a clear message and a non-zero exit.
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
RUN = REPO / "tools" / "alignment" / "run.py"
COMPARE = REPO / "tools" / "alignment" / "compare.py"
BINARY = os.environ.get("MICROLLM_ALIGNMENT")
PYTHON = "/usr/bin/python3"


def run_alignment(out, *extra):
    assert BINARY, "MICROLLM_ALIGNMENT is not set"
    return subprocess.run([PYTHON, str(RUN), "--microllm-binary", BINARY, "--python", PYTHON, "--output", str(out),
                           "--warmup", "1", "--repetitions", "3", *extra], capture_output=True, text=True)


@pytest.fixture(scope="module")
def passing_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("alignment") / "out"
    proc = run_alignment(out)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return out


def compare(out, *extra):
    return subprocess.run([PYTHON, str(COMPARE), "--output", str(out), *extra], capture_output=True, text=True)


def edit_records(path, edit):
    records = [json.loads(line) for line in path.read_text().splitlines()]
    records = [r for r in (edit(r) for r in records) if r is not None]
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def copy_run(src, tmp_path):
    dst = tmp_path / "copy"
    shutil.copytree(src, dst)
    return dst


def test_tiny_model_passes_with_every_artifact(passing_run):
    comparison = json.loads((passing_run / "comparison.json").read_text())
    assert comparison["status"] == "PASS"
    manifest = json.loads((passing_run / "manifest.json").read_text())
    assert manifest["failed_stage"] is None
    assert all(s["returncode"] == 0 for s in manifest["stages"])
    for name in ["manifest.json", "microllm_run.json", "pytorch_run.json", "microllm_parameters.jsonl",
                 "comparison.json", "report.md"] + [
            f"{side}_{stem}.jsonl" for side in ("microllm", "pytorch")
            for stem in ("values", "operator_timing", "layer_timing", "training_values", "backward_timing")] + [
            f"logs/{side}.{s}.txt" for side in ("microllm", "pytorch", "compare") for s in ("stdout", "stderr")]:
        assert (passing_run / name).is_file(), name
        assert name in manifest["artifacts"], name
    # Every parameter has a compared gradient; every forward value and the loss were compared.
    parameters = {json.loads(l)["name"] for l in (passing_run / "microllm_parameters.jsonl").read_text().splitlines()}
    gradients = {r["name"] for r in comparison["checkpoints"] if r["kind"] == "gradient" and r["status"] == "PASS"}
    assert parameters and gradients == parameters
    names = {r["name"] for r in comparison["checkpoints"] if r["kind"] == "value"}
    assert {"ids", "embedding", "layers.0.attn.q", "layers.1.output", "final_norm", "logits"} <= names
    assert comparison["domains"]["loss"]["passed"] == 1
    # Timing rows exist for both sides with the statistics the report shows.
    for domain in ("operator", "layer", "backward"):
        rows = comparison["timings"][domain]
        assert rows and all("microllm" in r and "pytorch" in r for r in rows), domain
        assert set(rows[0]["microllm"]) >= {"min", "mean", "median", "p95", "max"}
    assert "# Model alignment: PASS" in (passing_run / "report.md").read_text()


def test_a_changed_forward_value_fails(passing_run, tmp_path):
    out = copy_run(passing_run, tmp_path)

    def nudge(r):
        if r["name"] == "layers.0.attn.out":
            r["values"][5] += 1e-3
        return r

    edit_records(out / "microllm_values.jsonl", nudge)
    proc = compare(out)
    assert proc.returncode == 1
    bad = [r for r in json.loads((out / "comparison.json").read_text())["checkpoints"] if r["status"] == "FAIL"]
    assert [r["name"] for r in bad] == ["layers.0.attn.out"]
    assert bad[0]["max_abs_index"] == 5 and "outside atol" in bad[0]["problems"][0]


def test_a_missing_gradient_fails(passing_run, tmp_path):
    out = copy_run(passing_run, tmp_path)
    edit_records(out / "microllm_training_values.jsonl",
                 lambda r: None if r["name"] == "model.norm.weight" else r)
    edit_records(out / "pytorch_training_values.jsonl",
                 lambda r: None if r["name"] == "model.norm.weight" else r)
    proc = compare(out)
    assert proc.returncode == 1
    bad = [r for r in json.loads((out / "comparison.json").read_text())["checkpoints"] if r["status"] == "FAIL"]
    assert [(r["name"], r["problems"]) for r in bad] == [("model.norm.weight", ["parameter without a gradient"])]


def test_a_matching_loss_with_a_changed_gradient_fails(passing_run, tmp_path):
    out = copy_run(passing_run, tmp_path)

    def flip(r):
        if r["name"] == "model.layers.1.mlp.down_proj.weight":
            r["values"][0] = -r["values"][0] + 1e-3
        return r

    edit_records(out / "microllm_training_values.jsonl", flip)
    proc = compare(out)
    assert proc.returncode == 1
    result = json.loads((out / "comparison.json").read_text())
    assert result["domains"]["loss"]["failed"] == 0 and result["domains"]["gradients"]["failed"] == 1


def test_truncated_capture_fails_unless_partial(tmp_path):
    proc = run_alignment(tmp_path / "truncated", "--max-captured-elements", "100")
    assert proc.returncode == 1
    manifest = json.loads((tmp_path / "truncated" / "manifest.json").read_text())
    assert manifest["failed_stage"] == "compare"
    assert "truncated capture" in (tmp_path / "truncated" / "report.md").read_text()
    proc = run_alignment(tmp_path / "partial", "--max-captured-elements", "100", "--partial")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_existing_results_are_kept_without_overwrite(passing_run):
    before = (passing_run / "comparison.json").read_bytes()
    proc = run_alignment(passing_run)
    assert proc.returncode == 2
    assert "already holds results" in proc.stderr and "--overwrite" in proc.stderr
    assert (passing_run / "comparison.json").read_bytes() == before


def test_missing_binary_and_broken_python_are_clear_errors(tmp_path):
    proc = subprocess.run([PYTHON, str(RUN), "--microllm-binary", str(tmp_path / "nope"), "--python", PYTHON,
                           "--output", str(tmp_path / "a")], capture_output=True, text=True)
    assert proc.returncode == 2 and "no such executable" in proc.stderr
    proc = subprocess.run([PYTHON, str(RUN), "--microllm-binary", BINARY, "--python", "/bin/false",
                           "--output", str(tmp_path / "b")], capture_output=True, text=True)
    assert proc.returncode == 1 and "cannot import torch" in proc.stderr
    manifest = json.loads((tmp_path / "b" / "manifest.json").read_text())
    assert manifest["failed_stage"] == "pytorch-import"


def test_a_mismatched_config_is_a_clear_error(tmp_path):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"model_type": "gpt2", "vocab_size": 10}))
    proc = run_alignment(tmp_path / "out", "--config", str(cfg))
    assert proc.returncode == 1
    assert "stage microllm values failed" in proc.stderr and "gpt2" in proc.stderr
