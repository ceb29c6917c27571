"""The training benchmark's tooling on the CPU: the stage-line parser, and run_train_bench.py
end to end with the real `microllm` on a tiny random model (no PyTorch peer): the record's
training FLOPs per token equal `microllm inspect`'s at T/2, its MFU follows from its
tokens/s, and it holds rank 0's median time per stage. Needs numpy and pytest; no GPU."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parents[1] / "tools" / "records"))
import run_train_bench  # noqa: E402

STAGE_OUTPUT = """step 3 loss 5.1 lr 1e-4 norm 1.0 tokens/s 1000
stage time per step, median of 2 step(s), ms:
  rank 0  forward 12.500  backward 30.250  comm wait 0.000  optimizer 4.125
  rank 1  forward 13.000  backward 31.000  comm wait 1.000  optimizer 4.000
"""


def test_stage_medians_reads_rank_zero():
    assert run_train_bench.stage_medians(STAGE_OUTPUT) == {
        "forward": 12.5, "backward": 30.25, "comm wait": 0.0, "optimizer": 4.125}


def test_stage_medians_without_the_line_is_none():
    assert run_train_bench.stage_medians("step 1 loss 5 lr 1 norm 1 tokens/s 10\n") is None
    assert run_train_bench.stage_medians(STAGE_OUTPUT.replace("optimizer", "opt")) is None


def test_kernel_switches_leave_out_provenance():
    env = {"MICROLLM_FUSED_QKV_HEADS": "0", "MICROLLM_GIT_COMMIT": "abc", "MICROLLM_GIT_DIRTY": "0",
           "PATH": "/bin", "MICROLLM_GEMM_MEASURE": "0"}
    assert run_train_bench.kernel_switches(env) == {"MICROLLM_FUSED_QKV_HEADS": "0",
                                                    "MICROLLM_GEMM_MEASURE": "0"}
    assert run_train_bench.kernel_switches({"MICROLLM_GIT_COMMIT": "abc"}) == {}


def test_mfu():
    assert run_train_bench.mfu(None, 1e9) is None
    assert run_train_bench.mfu(794e3, 1e9) == pytest.approx(1.0)


@pytest.mark.skipif(not os.environ.get("MICROLLM_CLI"), reason="MICROLLM_CLI (the microllm binary) not set")
def test_record_on_the_cpu(tmp_path):
    cli = os.environ["MICROLLM_CLI"]
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"model_type": "qwen2", "vocab_size": 300, "hidden_size": 32,
                                  "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
                                  "num_key_value_heads": 2, "tie_word_embeddings": True}))
    records = tmp_path / "records"
    proc = subprocess.run([sys.executable, str(HERE / "run_train_bench.py"), "--microllm", cli,
                           "--config", str(config), "--batch", "2", "--seq", "16", "--steps", "3",
                           "--warmup", "1", "--device", "cpu", "--no-peer", "--records-dir", str(records)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    files = list((records / "train").glob("*.json"))
    assert len(files) == 1
    rec = json.loads(files[0].read_text())
    d = rec["derived"]
    inspect = json.loads(subprocess.run([cli, "inspect", "--config", str(config), "--json", "--context", "8"],
                                        capture_output=True, text=True, check=True).stdout)
    assert d["training_flops_per_token"] == inspect["training_flops_per_token"]
    assert d["mfu"]["microllm"] == pytest.approx(d["microllm_tokens_per_s"] * d["training_flops_per_token"] / 794e12)
    assert d["mfu"]["peer"] is None and d["mfu"]["compiled_peer"] is None
    stages = d["microllm_stage_ms"]
    assert set(stages) == {"forward", "backward", "comm wait", "optimizer"}
    assert stages["forward"] > 0 and stages["backward"] > 0 and stages["optimizer"] > 0
    assert len(rec["samples"]["values"]) == 3
