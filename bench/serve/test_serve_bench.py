"""The serving benchmark's tooling on the CPU: run_serve_bench.py drives a real `microllm
serve` on the committed qwen2-trained fixture with microllm_bench_serve and the static-batch
peer microllm_bench_generate, and its records, table and README table are checked against
the raw documents the programs wrote. make_serve_model.py's tokenizer covers the vocabulary.
Needs the binaries (MICROLLM_CLI, MICROLLM_BENCH_SERVE, MICROLLM_BENCH_GENERATE) and pytest."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(REPO / "tools" / "records"))
import make_serve_model  # noqa: E402
import readme_tables  # noqa: E402
import run_serve_bench  # noqa: E402

FIXTURE = REPO / "tests" / "fixtures" / "models" / "qwen2-trained"


def binary(name: str) -> str:
    path = os.environ.get(name)
    if not path:
        pytest.fail(f"{name} is not set (CTest sets it)")
    return path


@pytest.fixture(scope="module")
def bench_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("serve-bench")
    code = run_serve_bench.main([
        "--microllm", binary("MICROLLM_CLI"), "--bench-serve", binary("MICROLLM_BENCH_SERVE"),
        "--bench-generate", binary("MICROLLM_BENCH_GENERATE"), "--model-dir", str(FIXTURE),
        "--device", "cpu", "--dtype", "f32", "--concurrency", "1,3", "--requests-per-client", "2",
        "--prompt-len", "8:40", "--output-len", "4:12", "--reps", "2", "--text-concurrency", "2",
        "--peers", "generate", "--peer-reps", "2", "--records-dir", str(tmp / "records"),
        "--raw-dir", str(tmp / "raw"), "--table-out", str(tmp / "table.txt")])
    records = [json.loads(p.read_text()) for p in sorted((tmp / "records" / "serve").glob("*.json"))]
    return code, records, tmp


def test_every_request_runs_to_its_max_tokens_and_the_records_hold_the_raw_numbers(bench_run):
    code, records, tmp = bench_run
    assert code == 0, (tmp / "table.txt").read_text() if (tmp / "table.txt").exists() else "no table"
    assert [r["config"]["concurrency"] for r in records] == [1, 3]
    for r in records:
        c = r["config"]["concurrency"]
        raws = [json.loads((tmp / "raw" / f"serve-qwen2-trained-c{c}-rep{i}.json").read_text()) for i in range(2)]
        # ignore_eos: every request's usage equals the max_tokens it asked for; none failed.
        for doc in raws:
            assert doc["failed_requests"] == 0
            assert len(doc["per_request"]) == max(8, 2 * c)
            for q in doc["per_request"]:
                assert q["error"] is None and q["completion_tokens"] == q["max_tokens"]
                assert 8 <= q["prompt_len"] <= 40 and q["prompt_tokens"] == q["prompt_len"]
            assert doc["completion_tokens"] == sum(q["max_tokens"] for q in doc["per_request"])
            assert doc["counters"]["microllm:generation_tokens_total"] == doc["completion_tokens"]
        # Samples are the raw runs' throughputs; the peer's are derived from the driver's samples.
        assert r["samples"]["values"] == [d["output_tokens_per_s"] for d in raws]
        peer = json.loads((tmp / "raw" / f"generate-qwen2-trained-b{c}.json").read_text())["samples"]
        n = r["config"]["peer_shape"]["new_tokens"]
        expected = [c * n / (t / 1e3 + c * (n - 1) / d) for t, d in zip(peer["ttft_ms"], peer["decode_tokens_per_s"])]
        assert r["peer"]["samples"]["values"] == pytest.approx(expected)
        assert r["ratio_of_medians"]["value"] == pytest.approx(r["summary"]["median"] / r["peer"]["summary"]["median"])
        d = r["derived"]
        assert d["preemptions"] == 0 and d["engine_steps"] > 0 and 0 < d["engine_busy_fraction"] <= 1.0
        assert d["detokenize_us_per_output_token"] > 0 and d["ttft_ms_p50"] > 0
        assert r["errors"] == {"serve": None, "generate": None}
        # The text-prompt run makes the server tokenize: its cost per prompt token is measured.
        assert r["text_prompt_run"]["tokenize_us_per_prompt_token"] > 0


def test_the_table_and_the_readme_block_show_every_concurrency(bench_run):
    _, records, tmp = bench_run
    assert [line.split()[0] for line in (tmp / "table.txt").read_text().splitlines()[2:4]] == ["1", "3"]
    for r in records:
        r["git"]["dirty"] = False
    rows = readme_tables.serve_table(records).splitlines()[2:]
    assert [row.split("|")[2].strip() for row in rows] == ["1", "3"]
    assert f"{records[0]['derived']['output_tokens_per_s']:,.0f}" in rows[0]


def test_the_padded_tokenizer_names_every_id_once(tmp_path):
    doc = make_serve_model.padded_tokenizer(5000)
    ids = sorted(list(doc["model"]["vocab"].values()) + [t["id"] for t in doc["added_tokens"]])
    assert ids == list(range(5000))
    assert doc["model"]["vocab"]["\u0120fill4998"] == 4998
    assert doc["added_tokens"][0]["id"] == 4999  # HF's id for an added token not in the vocabulary
    with pytest.raises(SystemExit):
        make_serve_model.padded_tokenizer(100)  # below the fixture's own 1,024 ids
    # microllm's tokenizer (HF's id rules) names every id of the padded file.
    folder, vocab = tmp_path / "model", 1500
    config = json.loads((FIXTURE / "config.json").read_text())
    config["vocab_size"] = vocab
    (tmp_path / "config.json").write_text(json.dumps(config))
    assert make_serve_model.main(["--config", str(tmp_path / "config.json"), "--out", str(folder),
                                  "--tokenizer-only"]) == 0
    done = subprocess.run([binary("MICROLLM_CLI"), "tokenizer", "decode", "--tokenizer", str(folder),
                           "--ids", json.dumps(list(range(vocab)))], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.rstrip("\n").endswith(" fill1498<|endoftext|>")
