"""Every benchmark number in the README equals its committed record."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import readme_tables  # noqa: E402


def test_readme_blocks_match_records():
    readme = readme_tables.REPO_ROOT / "README.md"
    text = readme.read_text()
    assert "<!-- records:ops:begin -->" in text
    assert readme_tables.render(text) == text, "run tools/records/readme_tables.py --write"


def test_dirty_records_are_never_cited(tmp_path):
    ops = tmp_path / "ops"
    ops.mkdir()
    clean = {"git": {"dirty": False, "commit": "a" * 40}, "created_utc": "2026-01-01T00:00:00Z",
             "config": {"case": "x"}, "summary": {"median": 1.0}}
    dirty = dict(clean, git={"dirty": True, "commit": "b" * 40}, created_utc="2026-02-01T00:00:00Z")
    (ops / "1.json").write_text(__import__("json").dumps(clean))
    (ops / "2.json").write_text(__import__("json").dumps(dirty))
    records = readme_tables.load_records("ops", tmp_path)
    assert [r["git"]["commit"][0] for r in records] == ["a"]
