"""The decode benchmark's tooling on the CPU: the static-cache PyTorch peer against the
explicit reference model, and run_generate_bench.py's records and table (with stand-ins
for microllm_bench_generate and torch_generate.py that print numbers derived from the case),
and the README table generated from those records. Needs torch (Debian's 1.13 will do) and
pytest; no GPU, no transformers."""

import json
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parents[1] / "tools" / "records"))
import readme_tables  # noqa: E402
import record  # noqa: E402
import run_generate_bench  # noqa: E402
import torch_generate  # noqa: E402


def test_static_cache_model_equals_the_reference_model():
    # Greedy ids of the cached model = full-recompute greedy of tools/alignment/torch_reference.py
    # for qwen2 (biases, tied), llama (untied) and qwen3 (QK-norm, head_dim 16 ≠ 32/4); asserts inside.
    assert torch_generate.self_check() == 0


# Stand-ins. microllm: decode tokens/s = 100·B + rep, prefill = C/100 + rep ms, TTFT = prefill + 1.
# The static peer decodes at half microllm's rate and prefills in twice its time; HF at a quarter.
FAKE_BENCH = r'''
import json, os, sys
a = sys.argv[1:]
opt = {a[i]: a[i + 1] for i in range(0, len(a) - 1) if a[i].startswith("--")}
B, C, R = int(opt["--batch"]), int(opt["--context"]), int(opt["--reps"])
if os.environ.get("FAKE_FAIL") == f"{B},{C}":
    sys.exit("microllm_bench_generate: error: out of blocks")
doc = {"config": {"batch": B, "context": C, "new_tokens": int(opt["--new-tokens"]), "model": opt["--config"]},
       "samples": {"decode_tokens_per_s": [100.0 * B + r for r in range(R)],
                   "prefill_ms": [C / 100 + r for r in range(R)], "ttft_ms": [C / 100 + r + 1 for r in range(R)],
                   "host_ms_per_step": [0.5] * R, "launch_ms_per_step": [0.25] * R},
       "peak_memory_bytes": 2**30 * B, "kv_bytes": 1000 * B * C, "kernels_per_step": 7}
open(opt["--out"], "w").write(json.dumps(doc))
'''
FAKE_TORCH = r'''
import json, sys
a = sys.argv[1:]
opt = {a[i]: a[i + 1] for i in range(0, len(a) - 1) if a[i].startswith("--")}
R, HR = int(opt["--reps"]), int(opt["--hf-reps"])
cases = []
for B in map(int, opt["--batch"].split(",")):
    for C in map(int, opt["--context"].split(",")):
        for peer, speed, n in (("static_compiled", 2, R), ("hf_generate", 4, HR)):
            cases.append({"peer": peer, "batch": B, "context": C, "new_tokens": int(opt["--new-tokens"]),
                          "samples": {"decode_tokens_per_s": [(100.0 * B + r) / speed for r in range(n)],
                                      "prefill_ms": [(C / 100 + r) * speed for r in range(n)],
                                      "ttft_ms": [(C / 100 + r + 1) * speed for r in range(n)]},
                          "peak_memory_bytes": 2**31 * B, "kv_bytes": 2000 * B * C, "hf_prefix_agreement": 0.9})
doc = {"tool": "torch_generate", "versions": {"torch": "9.9", "transformers": "9.9"}, "cases": cases}
open(opt["--out"], "w").write(json.dumps(doc))
print(json.dumps(doc))
'''


@pytest.fixture
def bench_run(tmp_path, capsys, monkeypatch):
    bench = tmp_path / "microllm_bench_generate"
    bench.write_text(f"#!{sys.executable}\n" + FAKE_BENCH)
    bench.chmod(0o755)
    torch_script = tmp_path / "fake_torch.py"
    torch_script.write_text(FAKE_TORCH)
    monkeypatch.setenv("MICROLLM_GIT_COMMIT", "c0ffee0" + "0" * 33)
    monkeypatch.setenv("MICROLLM_GIT_DIRTY", "0")

    def run(*extra, fail=None):
        if fail:
            monkeypatch.setenv("FAKE_FAIL", fail)
        records = tmp_path / "records"
        rc = run_generate_bench.main(["--bench", str(bench), "--torch-script", str(torch_script),
                                      "--models", "qwen2.5-0.5b", "--batch", "1,8", "--context", "8,512",
                                      "--new-tokens", "16", "--reps", "3", "--hf-reps", "2", "--warmup", "1",
                                      "--records-dir", str(records), "--raw-dir", str(tmp_path / "raw"), *extra])
        files = sorted((records / "generate").glob("*.json"))
        return rc, [json.loads(f.read_text()) for f in files], capsys.readouterr().out
    run.tmp = tmp_path
    return run


def test_one_record_per_case_with_both_peers_and_ratios_in_the_faster_direction(bench_run):
    rc, recs, out = bench_run()
    assert rc == 0, out
    assert sorted(r["config"]["case"] for r in recs) == [
        "qwen2.5-0.5b-b1-c512-n16", "qwen2.5-0.5b-b1-c8-n16", "qwen2.5-0.5b-b8-c512-n16", "qwen2.5-0.5b-b8-c8-n16"]
    for r in recs:
        assert record.validate(r) == []
        B, C = r["config"]["batch"], r["config"]["context"]
        assert r["kind"] == "generate" and r["samples"]["units"] == "tokens/s"
        assert r["samples"]["values"] == [100.0 * B, 100.0 * B + 1, 100.0 * B + 2]
        # Medians: microllm 100B + 1, static (100B + 1) / 2, HF (100B + 0.5) / 4 (two reps).
        assert r["ratio_of_medians"]["higher_is_better"] is True
        assert r["ratio_of_medians"]["value"] == pytest.approx(2.0)
        assert r["peers"]["hf_generate"]["ratio_of_medians"]["value"] == pytest.approx(
            (100 * B + 1) / ((100 * B + 0.5) / 4))
        d = r["derived"]
        assert d["microllm_prefill_ms"] == pytest.approx(C / 100 + 1)
        assert d["prefill_ms_ratio_vs_static_compiled"] == pytest.approx(2.0)  # peer ms / microllm ms
        assert d["ttft_ms_ratio_vs_hf_generate"] == pytest.approx((C / 100 + 1.5) * 4 / (C / 100 + 2))
        assert d["microllm_host_ms_per_step"] == 0.5
        assert d["microllm_launch_ms_per_step"] == 0.25
        assert "static_compiled" not in r["metrics"]["launch_ms_per_step"]
        assert r["metrics"]["ttft_ms"]["static_compiled"]["values"] == [(C / 100 + k + 1) * 2 for k in range(3)]
        assert r["memory"]["microllm"] == {"peak_memory_bytes": 2**30 * B, "kv_bytes": 1000 * B * C,
                                           "decode_bytes_per_step": None}
        assert r["memory"]["static_compiled"]["kv_bytes"] == 2000 * B * C
        assert r["kernels_per_step"] == 7 and r["checks"]["static_compiled.hf_prefix_agreement"] == 0.9
        assert r["errors"] == {"microllm": None, "static_compiled": None, "hf_generate": None}
        assert r["git"] == {"commit": "c0ffee0" + "0" * 33, "dirty": False}
        assert r["config"]["commands"]["microllm"][r["config"]["commands"]["microllm"].index("--batch") + 1] == str(B)
    raw = sorted(p.name for p in (bench_run.tmp / "raw").iterdir())
    assert raw == ["microllm-qwen2.5-0.5b-b1-c512-n16.json", "microllm-qwen2.5-0.5b-b1-c8-n16.json",
                   "microllm-qwen2.5-0.5b-b8-c512-n16.json", "microllm-qwen2.5-0.5b-b8-c8-n16.json",
                   "torch-qwen2.5-0.5b.json"]
    lines = out.strip().splitlines()
    assert lines[-1].startswith("decode tokens/s medians; ratio = microllm / peer")
    row = next(l for l in lines if l.startswith("qwen2.5-0.5b") and l.split()[2:4] == ["8", "512"])
    assert row.split()[1] == "graphs" and row.split()[4:7] == ["801", "400", "2.00"]


def test_a_failed_case_is_recorded_without_samples_and_fails_the_run(bench_run):
    rc, recs, out = bench_run(fail="8,512")
    assert rc == 1
    bad = next(r for r in recs if r["config"]["case"] == "qwen2.5-0.5b-b8-c512-n16")
    assert bad["summary"] is None and bad["ratio_of_medians"]["value"] is None
    assert "without a JSON document" in bad["errors"]["microllm"]
    assert record.validate(bad) == []
    assert "errors:" in out


def test_quick_selects_the_small_subset():
    args = run_generate_bench.parse_args(["--bench", "x", "--quick"])
    assert (args.models, args.batch, args.context, args.new_tokens, args.reps) == (["qwen2.5-0.5b"], [1, 8], [512], 64, 3)
    assert run_generate_bench.config_path("qwen2.5-0.5b").is_file()


def test_readme_table_of_generate_records(bench_run):
    rc, recs, _ = bench_run()
    assert rc == 0
    rows = readme_tables.generate_table(readme_tables.load_records("generate", bench_run.tmp / "records")).splitlines()
    assert rows[0].startswith("| model shape | batch | context | new tokens | decode | microllm tokens/s |")
    # Sorted by batch then context as numbers; ratios from the records.
    assert [r.split(" | ")[1:3] for r in rows[2:]] == [["1", "8"], ["1", "512"], ["8", "8"], ["8", "512"]]
    # TTFT medians: microllm 512/100 + 1 + 1 = 7.12 ms, the static peer twice that.
    assert rows[-1] == ("| qwen2.5-0.5b | 8 | 512 | 16 | graphs | 801 | 400 | 2.00× | 200 | 4.00× | 7.1 / 14.2 ms | "
                        "0.500 | 7 | 8.00 GiB | `c0ffee0` |")


def test_readme_generate_block_is_rendered_from_the_records():
    text = "intro\n<!-- records:generate:begin -->\nstale\n<!-- records:generate:end -->\nrest\n"
    rendered = readme_tables.render(text)
    body = readme_tables.generate_table(readme_tables.load_records("generate"))
    assert rendered == f"intro\n<!-- records:generate:begin -->\n{body}\n<!-- records:generate:end -->\nrest\n"


def test_dirty_generate_records_are_never_cited(tmp_path, bench_run, monkeypatch):
    monkeypatch.setenv("MICROLLM_GIT_DIRTY", "1")
    rc, recs, _ = bench_run()
    assert rc == 0 and all(r["git"]["dirty"] for r in recs)
    assert readme_tables.load_records("generate", bench_run.tmp / "records") == []
