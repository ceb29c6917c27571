"""Tests of tools/records/record.py: statistics against values computed by hand, exclusive
creation, provenance fallbacks and validation. Needs only pytest (runs in CPU CI)."""

import datetime as dt
import json
import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import record  # noqa: E402

CREATED = dt.datetime(2026, 10, 28, 12, 34, 56, tzinfo=dt.timezone.utc)


def small_record(samples, peer=None):
    return record.make_record(
        "ops", {"case": "unit"}, samples, "ms", peer=peer, command=["bench", "--x"],
        host={"cpu": "test", "gpu": None, "driver": None, "cuda": None, "clocks": None},
        git={"commit": "abc", "dirty": False}, created=CREATED)


def test_summary_of_odd_count_by_hand():
    # sorted 1 2 3 4 10: mean 20/5; type-7 ranks h = 4p: median x[2], q1 x[1], q3 x[3],
    # p95 at h = 3.8: 4 + 0.8·(10 − 4) = 8.8; squared deviations 9+4+1+0+36 = 50.
    s = record.summarize([4, 1, 3, 2, 10])
    assert s["count"] == 5
    assert (s["min"], s["max"], s["mean"], s["median"]) == (1, 10, 4, 3)
    assert (s["q1"], s["q3"], s["iqr"]) == (2, 4, 2)
    assert s["p95"] == pytest.approx(8.8, abs=1e-12)
    assert s["stdev"] == pytest.approx(math.sqrt(50 / 4), abs=1e-12)
    assert s["cv"] == pytest.approx(math.sqrt(12.5) / 4, abs=1e-12)


def test_summary_of_even_count_by_hand():
    # sorted 1 2 3 4: h = 3p: median h=1.5 → 2.5, q1 h=0.75 → 1.75, q3 h=2.25 → 3.25,
    # p95 h=2.85 → 3.85; squared deviations 2.25+0.25+0.25+2.25 = 5.
    s = record.summarize([3.0, 1.0, 4.0, 2.0])
    assert s["median"] == pytest.approx(2.5)
    assert s["q1"] == pytest.approx(1.75)
    assert s["q3"] == pytest.approx(3.25)
    assert s["iqr"] == pytest.approx(1.5)
    assert s["p95"] == pytest.approx(3.85)
    assert s["mean"] == pytest.approx(2.5)
    assert s["stdev"] == pytest.approx(math.sqrt(5 / 3))
    assert s["cv"] == pytest.approx(math.sqrt(5 / 3) / 2.5)


def test_summary_of_one_sample():
    s = record.summarize([7.5])
    assert s["min"] == s["median"] == s["p95"] == s["max"] == s["mean"] == 7.5
    assert s["iqr"] == 0 and s["stdev"] == 0 and s["cv"] == 0


def test_summary_rejects_empty_and_non_finite():
    with pytest.raises(ValueError):
        record.summarize([])
    with pytest.raises(ValueError):
        record.summarize([1.0, float("nan")])
    with pytest.raises(ValueError):
        record.percentile([1.0], 1.5)


def test_ratio_of_medians_is_peer_over_microllm():
    r = small_record([1, 2, 3], peer={"name": "torch", "samples": [2, 4, 6]})
    assert r["ratio_of_medians"]["value"] == pytest.approx(2.0)
    assert r["peer"]["summary"]["median"] == 4
    assert r["peer"]["samples"] == {"units": "ms", "values": [2.0, 4.0, 6.0]}


def test_record_fields_follow_the_spec():
    r = small_record([1.0, 2.0])
    for key in ("schema", "kind", "created_utc", "git", "command", "host", "versions", "config",
                "samples", "summary"):
        assert key in r
    assert r["schema"] == "microllm-record-v1"
    assert r["created_utc"] == "2026-10-28T12:34:56Z"
    assert r["samples"] == {"units": "ms", "values": [1.0, 2.0]}
    assert record.validate(r) == []


def test_write_is_exclusive_and_never_overwrites(tmp_path):
    first = small_record([1.0, 2.0, 3.0])
    path = record.write_record(first, "unit-case", tmp_path)
    assert path == tmp_path / "ops" / "20261028T123456Z-unit-case.json"
    before = path.read_text()
    with pytest.raises(FileExistsError):
        record.write_record(small_record([9.0]), "unit-case", tmp_path)
    assert path.read_text() == before
    assert json.loads(before)["samples"]["values"] == [1.0, 2.0, 3.0]


def test_short_names_cannot_leave_the_records_folder(tmp_path):
    with pytest.raises(ValueError):
        record.write_record(small_record([1.0]), "../escape", tmp_path)


def test_validate_catches_a_summary_that_differs_from_its_samples():
    r = small_record([1.0, 2.0, 3.0], peer={"name": "torch", "samples": [3.0]})
    r["summary"]["median"] = 2.5
    r["ratio_of_medians"]["value"] = 1.0
    problems = record.validate(r)
    assert any("summary.median" in p for p in problems)
    assert any("ratio_of_medians" in p for p in problems)


def test_failed_run_has_no_summary_and_no_ratio():
    r = small_record([], peer={"name": "torch", "samples": [1.0]})
    assert r["summary"] is None
    assert r["ratio_of_medians"]["value"] is None
    assert record.validate(r) == []


def test_git_state_without_git_uses_the_environment(tmp_path):
    env = {"MICROLLM_GIT_COMMIT": "0123abc", "MICROLLM_GIT_DIRTY": "0"}
    assert record.git_state(tmp_path, env) == {"commit": "0123abc", "dirty": False}
    env["MICROLLM_GIT_DIRTY"] = "true"
    assert record.git_state(tmp_path, env)["dirty"] is True
    # No .git and nothing stated: unknown provenance counts as dirty.
    assert record.git_state(tmp_path, {}) == {"commit": "unknown", "dirty": True}


def test_stated_provenance_wins_over_a_git_folder():
    # The GPU machine's copy of the tree may hold a stale .git; the caller's statement wins.
    env = {"MICROLLM_GIT_COMMIT": "feedbeef", "MICROLLM_GIT_DIRTY": "0"}
    assert record.git_state(record.REPO_ROOT, env) == {"commit": "feedbeef", "dirty": False}


def test_microllm_version_reads_the_cmake_project(tmp_path):
    (tmp_path / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.25)\nproject(microllm VERSION 1.2.3 LANGUAGES C CXX)\n")
    assert record.microllm_version(tmp_path) == "1.2.3"


def test_rate_units_take_microllm_over_peer():
    # tokens/s: microllm medians 200, peer 100 → microllm is 2× faster, ratio 2.
    r = record.make_record(
        "generate", {"case": "unit"}, [190, 200, 210], "tokens/s",
        peer={"name": "torch", "samples": [90, 100, 110]}, command=["bench"],
        host={"cpu": "test", "gpu": None, "driver": None, "cuda": None, "clocks": None},
        git={"commit": "abc", "dirty": False}, created=CREATED, higher_is_better=True)
    assert r["ratio_of_medians"]["value"] == pytest.approx(2.0)
    assert r["ratio_of_medians"]["higher_is_better"] is True
    assert r["ratio_of_medians"]["definition"].startswith("microllm median / peer median")
    assert record.validate(r) == []
    # The validator follows the stated direction: the time-like value is caught.
    r["ratio_of_medians"]["value"] = 0.5
    assert any("ratio_of_medians" in p for p in record.validate(r))


def test_time_units_keep_peer_over_microllm_and_no_direction_key():
    r = small_record([1, 2, 3], peer={"name": "torch", "samples": [4, 4, 4]})
    assert "higher_is_better" not in r["ratio_of_medians"]
    assert record.ratio_of_medians({"median": 2.0}, {"median": 4.0}) == 2.0
    assert record.ratio_of_medians({"median": 2.0}, {"median": 4.0}, higher_is_better=True) == 0.5
    assert record.ratio_of_medians({"median": 2.0}, {"median": 0.0}, higher_is_better=True) is None
