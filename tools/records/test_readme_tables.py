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


def test_records_from_another_gpu_are_not_cited(tmp_path):
    ops = tmp_path / "ops"
    ops.mkdir()
    h200 = {"git": {"dirty": False, "commit": "a" * 40}, "created_utc": "2026-01-01T00:00:00Z",
            "config": {"case": "x"}, "summary": {"median": 1.0}, "host": {"gpu": "NVIDIA H200"}}
    h100 = dict(h200, git={"dirty": False, "commit": "b" * 40}, created_utc="2026-02-01T00:00:00Z",
                host={"gpu": "NVIDIA H100 80GB HBM3"})
    (ops / "1.json").write_text(__import__("json").dumps(h200))
    (ops / "2.json").write_text(__import__("json").dumps(h100))  # newer, but another card
    records = readme_tables.load_records("ops", tmp_path)
    assert [r["git"]["commit"][0] for r in records] == ["a"]


def test_records_run_under_switches_are_not_cited(tmp_path):
    train = tmp_path / "train"
    train.mkdir()
    default = {"git": {"dirty": False, "commit": "a" * 40}, "created_utc": "2026-01-01T00:00:00Z",
               "config": {"config": "c/qwen/config.json", "batch": 8, "seq": 1024},
               "summary": {"median": 1.0}}
    switched = dict(default, git={"dirty": False, "commit": "b" * 40},
                    created_utc="2026-02-01T00:00:00Z",
                    config=dict(default["config"], switches={"MICROLLM_FUSED_QKV_HEADS": "0"}))
    (train / "1.json").write_text(__import__("json").dumps(default))
    (train / "2.json").write_text(__import__("json").dumps(switched))  # newer, but switched
    records = readme_tables.load_records("train", tmp_path)
    assert [r["git"]["commit"][0] for r in records] == ["a"]


def _generate_record(batch, context, commit, created, dirty=False, peers=True, mode=None):
    derived = {"microllm_decode_tokens_per_s": 1234.4, "microllm_ttft_ms": 5.25}
    case = f"m-b{batch}-c{context}-n128" + (f"-{mode}" if mode and mode != "graphs" else "")
    record = {"git": {"dirty": dirty, "commit": commit * 40}, "created_utc": created,
              "config": {"case": case, "model": "m", "batch": batch, "context": context, "new_tokens": 128},
              "summary": {"median": 1234.4}, "derived": derived,
              "memory": {"microllm": {"peak_memory_bytes": 3 * 2**30}}}
    if mode:  # records from before CUDA-graph decode carry no mode
        record["config"]["microllm_mode"] = mode
        record["kernels_per_step"] = 271
        derived["microllm_host_ms_per_step"] = 0.0474
    if peers:
        derived.update(static_compiled_decode_tokens_per_s=617.2, static_compiled_ttft_ms=10.5,
                       hf_generate_decode_tokens_per_s=123.44, decode_tokens_per_s_ratio_vs_hf_generate=10.0)
        record["ratio_of_medians"] = {"value": 2.0, "higher_is_better": True}
    return record


def test_generate_table_rows_sorted_by_number_newest_clean_record_per_case(tmp_path):
    folder = tmp_path / "generate"
    folder.mkdir()
    docs = [_generate_record(8, 512, "a", "2026-01-01T00:00:00Z"),
            _generate_record(8, 512, "b", "2026-02-01T00:00:00Z"),               # newer: cited
            _generate_record(8, 512, "c", "2026-03-01T00:00:00Z", dirty=True),   # dirty: never
            _generate_record(64, 8, "d", "2026-01-01T00:00:00Z", peers=False)]
    for i, doc in enumerate(docs):
        (folder / f"{i}.json").write_text(__import__("json").dumps(doc))
    rows = readme_tables.generate_table(readme_tables.load_records("generate", tmp_path)).splitlines()
    assert rows[2] == ("| m | 8 | 512 | 128 | eager | 1,234 | 617 | 2.00× | 123 | 10.00× | 5.2 / 10.5 ms | — | — | "
                       "3.00 GiB | `bbbbbbb` |")
    assert rows[3] == "| m | 64 | 8 | 128 | eager | 1,234 | — | — | — | — | 5.2 / — ms | — | — | 3.00 GiB | `ddddddd` |"
    assert len(rows) == 4


def test_generate_table_shows_the_decode_mode_graphs_first(tmp_path):
    folder = tmp_path / "generate"
    folder.mkdir()
    docs = [_generate_record(1, 8, "e", "2026-01-01T00:00:00Z", peers=False, mode="eager"),
            _generate_record(1, 8, "g", "2026-01-01T00:00:00Z", mode="graphs")]
    for i, doc in enumerate(docs):
        (folder / f"{i}.json").write_text(__import__("json").dumps(doc))
    rows = readme_tables.generate_table(readme_tables.load_records("generate", tmp_path)).splitlines()
    assert rows[2] == ("| m | 1 | 8 | 128 | graphs | 1,234 | 617 | 2.00× | 123 | 10.00× | 5.2 / 10.5 ms | 0.047 | 271 | "
                       "3.00 GiB | `ggggggg` |")
    assert rows[3].startswith("| m | 1 | 8 | 128 | eager | 1,234 | — |") and rows[3].endswith("| `eeeeeee` |")
    assert len(rows) == 4


def test_train_table_shows_mfu_and_stage_times_where_recorded():
    base = {"git": {"dirty": False, "commit": "c" * 40}, "_case": "m B8 T1024",
            "config": {"dtype": "bf16", "tokens_per_step": 8192}, "ratio_of_medians": {"value": 1.5}}
    new = dict(base, derived={"microllm_tokens_per_s": 1000.0, "peer_tokens_per_s": 600.0,
                              "compiled_peer": {"tokens_per_s": 800.0},
                              "mfu": {"microllm": 0.4493, "compiled_peer": 0.3611},
                              "microllm_stage_ms": {"forward": 20.23, "backward": 45.94,
                                                    "comm wait": 0.0, "optimizer": 4.84},
                              "microllm_peak_bytes": 2 * 2**30})
    old = dict(base, derived={"microllm_tokens_per_s": 900.0})
    rows = readme_tables.train_table([new, old]).splitlines()
    header = [c.strip() for c in rows[0].strip("|").split("|")]
    cells = [[c.strip() for c in row.strip("|").split("|")] for row in rows[2:]]
    assert cells[0][header.index("MFU microllm / compile")] == "44.9 % / 36.1 %"
    assert cells[0][header.index("forward / backward / optimizer ms")] == "20.2 / 45.9 / 4.8"
    assert cells[0][header.index("compile / microllm")] == "1.25×"
    assert cells[1][header.index("MFU microllm / compile")] == "—"
    assert cells[1][header.index("forward / backward / optimizer ms")] == "—"
