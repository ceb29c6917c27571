"""The operator oracle's runner, microllm_op_runner (tests/oracle/op_runner.cpp): every
operator it dispatches has an oracle case in tests/ops/<op>/test_<op>_oracle.py, bad input
gives a message and exit code 1, and the .npy files it writes load in NumPy unchanged.
"""
import json
import os
import subprocess

import numpy as np

from oracle_support import all_cases, run_runner, runner_path


def test_every_op_is_covered():
    """Each operator in the runner's dispatch table has at least one oracle case."""
    listed = subprocess.run([runner_path(), "--list-ops"], capture_output=True, text=True, check=True)
    runner_ops = set(listed.stdout.split())
    assert runner_ops, "the runner lists no operators"
    covered = {c.op for c in all_cases()}
    assert runner_ops - covered == set(), f"operators without an oracle case: {sorted(runner_ops - covered)}"
    assert covered - runner_ops == set(), f"cases for unknown operators: {sorted(covered - runner_ops)}"


def test_runner_reports_errors(tmp_path):
    """Bad inputs: a message on stderr and exit code 1 (shape mismatch, unknown op, bad file)."""
    np.save(tmp_path / "a.npy", np.zeros((2, 3), np.float32))
    np.save(tmp_path / "b.npy", np.zeros((4, 5), np.float32))
    (tmp_path / "case.json").write_text(json.dumps(
        {"op": "add", "inputs": [{"name": "a"}, {"name": "b"}]}))
    result = run_runner(tmp_path)
    assert result.returncode == 1 and "add" in result.stderr and "(2, 3)" in result.stderr, result.stderr

    (tmp_path / "case.json").write_text(json.dumps({"op": "no_such_op", "inputs": []}))
    result = run_runner(tmp_path)
    assert result.returncode == 1 and "unknown op 'no_such_op'" in result.stderr, result.stderr

    (tmp_path / "a.npy").write_bytes((tmp_path / "b.npy").read_bytes()[:-5])  # truncated data
    (tmp_path / "case.json").write_text(json.dumps({"op": "neg", "inputs": [{"name": "x"}]}))
    os.replace(tmp_path / "a.npy", tmp_path / "x.npy")
    result = run_runner(tmp_path)
    assert result.returncode == 1 and "x.npy" in result.stderr and "truncated" in result.stderr, result.stderr


def test_npy_interop(tmp_path):
    """Files microllm writes load in NumPy unchanged, for every dtype NumPy shares."""
    for dtype in (np.float64, np.float32, np.float16, np.int64, np.int32, np.int8, np.uint8, np.bool_):
        value = (np.arange(-6, 18).reshape(2, 3, 4) % 7).astype(dtype)
        np.save(tmp_path / "x.npy", value)
        (tmp_path / "case.json").write_text(json.dumps(
            {"op": "permute", "args": {"dims": [2, 0, 1]}, "inputs": [{"name": "x"}]}))
        result = run_runner(tmp_path)
        assert result.returncode == 0, result.stderr
        back = np.load(tmp_path / "out.npy")
        assert back.dtype == value.dtype and np.array_equal(back, value.transpose(2, 0, 1)), dtype
    # Fortran-ordered input is read correctly.
    value = np.asfortranarray(np.arange(12, dtype=np.float32).reshape(3, 4))
    np.save(tmp_path / "x.npy", value)
    (tmp_path / "case.json").write_text(json.dumps({"op": "contiguous", "inputs": [{"name": "x"}]}))
    assert run_runner(tmp_path).returncode == 0
    assert np.array_equal(np.load(tmp_path / "out.npy"), value)
