"""Tests of the operator alignment tool (run_operators.py): its error paths, that a wrong
value or a failing microllm fails the run, and the comparison's edge cases. The full run on
the CPU is the CTest test `operator_alignment`; these use one small operator.

  MICROLLM_ALIGNMENT=build/cpu-release/apps/microllm_alignment/microllm_alignment \\
      /usr/bin/python3 -m pytest -q tools/alignment/operators/test_run_operators.py
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

HERE = Path(__file__).resolve().parents[2] / "tools" / "alignment" / "operators"
sys.path.insert(0, str(HERE))
import compare  # noqa: E402
import tolerances  # noqa: E402

TOOL = HERE / "run_operators.py"


def binary() -> str:
    path = os.environ.get("MICROLLM_ALIGNMENT")
    if not path:
        pytest.fail("MICROLLM_ALIGNMENT is not set: point it at the microllm_alignment binary")
    return path


def run(*args, binary_path=None):
    cmd = [sys.executable, str(TOOL), "--microllm-binary", str(binary_path or binary()), *map(str, args)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600)


def fake_binary(tmp_path: Path, body: str) -> Path:
    """An executable standing in for microllm_alignment: a Python script with `body`."""
    path = tmp_path / "fake_microllm"
    path.write_text(f"#!{sys.executable}\nimport os, subprocess, sys\nimport numpy as np\n{body}\n")
    path.chmod(0o755)
    return path


def test_silu_passes_and_writes_every_report(tmp_path):
    out = tmp_path / "out"
    result = run("--output", out, "--ops", "silu")
    assert result.returncode == 0, result.stdout + result.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["pass"] and [o["operator"] for o in summary["operators"]] == ["silu"]
    rows = summary["rows"]
    assert {r["kind"] for r in rows} == {"sequential", "zeros", "ones", "small_random", "random", "extreme"}
    assert {r["output"] for r in rows} == {"out", "grad_x"}  # forward and backward
    comparison = json.loads((out / "silu" / "comparison.json").read_text())
    assert comparison["pass"] and len(comparison["cases"]) == 6
    report = (out / "report.md").read_text()
    assert "| silu | extreme | out | 1×4×5472 |" in report and report in result.stdout


def test_refuses_an_output_folder_holding_results(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "summary.json").write_text("{}")
    result = run("--output", out, "--ops", "silu")
    assert result.returncode == 2
    assert "already holds results" in result.stderr and "--overwrite" in result.stderr, result.stderr
    assert (out / "summary.json").read_text() == "{}"  # untouched
    assert not (out / "silu").exists()
    # --overwrite replaces exactly the results and runs.
    (out / "notes.txt").write_text("mine")
    result = run("--output", out, "--ops", "silu", "--overwrite")
    assert result.returncode == 0, result.stderr
    assert json.loads((out / "summary.json").read_text())["pass"]
    assert (out / "notes.txt").read_text() == "mine"


def test_missing_binary_is_one_clear_line(tmp_path):
    result = run("--output", tmp_path / "out", "--ops", "silu", binary_path=tmp_path / "no_such_binary")
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "no_such_binary" in lines[0] and "does not exist" in lines[0], result.stderr
    assert not (tmp_path / "out").exists()


def test_no_torch_is_one_clear_line(tmp_path):
    # A torch that fails to import, shadowing the real one.
    (tmp_path / "fake").mkdir()
    (tmp_path / "fake" / "torch.py").write_text("raise ImportError('libtorch_cpu.so: cannot open')\n")
    cmd = [sys.executable, str(TOOL), "--microllm-binary", binary(), "--output", str(tmp_path / "out"), "--ops", "silu"]
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "fake")}
    result = subprocess.run(cmd, capture_output=True, text=True, env=env)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "PyTorch is needed" in lines[0] and "libtorch_cpu.so" in lines[0], result.stderr
    assert not (tmp_path / "out").exists()


def test_unknown_operator_and_bad_device(tmp_path):
    result = run("--output", tmp_path / "out", "--ops", "silu,gelu")
    assert result.returncode == 2 and "unknown operator(s) gelu" in result.stderr, result.stderr
    result = run("--output", tmp_path / "out", "--ops", "silu", "--device", "gpu")
    assert result.returncode == 2 and "--device must be cpu, cuda or cuda:N" in result.stderr, result.stderr


def test_a_wrong_element_fails_the_run(tmp_path):
    # microllm's real outputs, with one element of the random case's out.npy moved by 1e-4.
    fake = fake_binary(tmp_path, f"""
rc = subprocess.run([{binary()!r}] + sys.argv[1:]).returncode
out = sys.argv[sys.argv.index("--out") + 1]
if rc == 0 and os.path.basename(sys.argv[sys.argv.index("--case") + 1]) == "random":
    y = np.load(os.path.join(out, "out.npy"))
    y.flat[1234] += 1e-4
    np.save(os.path.join(out, "out.npy"), y)
sys.exit(rc)""")
    out = tmp_path / "out"
    result = run("--output", out, "--ops", "silu", binary_path=fake)
    assert result.returncode == 1, result.stdout + result.stderr
    summary = json.loads((out / "summary.json").read_text())
    bad = [r for r in summary["rows"] if not r["pass"]]
    assert [(r["kind"], r["output"]) for r in bad] == [("random", "out")]
    assert "1 of 21888 elements beyond" in bad[0]["problems"][0]
    assert "**FAIL**" in (out / "report.md").read_text()


def test_a_failing_microllm_fails_the_run(tmp_path):
    fake = fake_binary(tmp_path, 'print("microllm_alignment: error: boom", file=sys.stderr); sys.exit(1)')
    out = tmp_path / "out"
    result = run("--output", out, "--ops", "silu", binary_path=fake)
    assert result.returncode == 1
    summary = json.loads((out / "summary.json").read_text())
    assert not summary["pass"] and len(summary["rows"]) == 6
    assert all("microllm failed: microllm_alignment: error: boom" in r["problems"][0] for r in summary["rows"])


def test_drop_arrays_keeps_the_reports(tmp_path):
    out = tmp_path / "out"
    result = run("--output", out, "--ops", "silu", "--drop-arrays")
    assert result.returncode == 0, result.stderr
    assert not list(out.rglob("*.npy"))
    assert (out / "silu" / "comparison.json").exists() and (out / "silu" / "random" / "case.json").exists()


def test_cosine_edge_cases():
    zeros, ones = np.zeros(4, np.float32), np.ones(4, np.float32)
    assert compare.cosine(zeros, zeros) == 1.0
    assert compare.cosine(zeros, ones) == 0.0 and compare.cosine(ones, zeros) == 0.0
    assert compare.cosine(ones, -ones) == -1.0
    assert np.isnan(compare.cosine(np.array([np.nan, 1.0]), np.array([1.0, 1.0])))


def test_compare_rules():
    ref = np.array([1.0, -2.0, 0.0], np.float32)
    row = compare.compare("out", ref + np.float32(2.5e-5), ref, compare.Tolerance())
    assert not row["pass"] and row["beyond"] == 2  # 1e-5 + 1e-5·|ref|: 2e-5 at 1, 3e-5 at -2, 1e-5 at 0
    row = compare.compare("out", ref.reshape(3, 1), ref, compare.Tolerance())
    assert not row["pass"] and "shape (3, 1) vs PyTorch (3,)" in row["problems"][0]
    nan = np.array([np.nan], np.float32)
    assert not compare.compare("out", nan, np.zeros(1, np.float32), compare.Tolerance())["pass"]
    assert compare.compare("out", nan, nan, compare.Tolerance())["pass"]


def test_linear_rounding_term():
    # out = x·Wᵀ with K = 4: 2λ·u·√K·Σ|x·w| per element.
    x = np.array([[1.0, -2.0, 3.0, -4.0]], np.float32)
    w = np.array([[1.0, 1.0, 1.0, 1.0], [0.5, 0.0, 0.0, 0.0]], np.float32)
    tol, rounding = tolerances.tolerance("linear", "out", {"x": x, "weight": w}, {}, {})
    expected = 2 * 5 * 2.0 ** -24 * 2 * np.array([[10.0, 0.5]])
    assert np.allclose(rounding, expected) and "K=4" in tol.describe()
    assert tolerances.tolerance("silu", "out", {"x": x}, {}, {}) == (compare.Tolerance(), None)
