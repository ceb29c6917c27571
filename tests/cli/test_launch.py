"""`microllm launch` end to end on the CPU: the torchrun environment of every rank, one failing
rank stopping the others with the launcher naming it, signal forwarding, and `microllm train`
refusing a multi-rank run clearly where it cannot run one (no NCCL, or no CUDA device).

Run by CTest (label cpu) with MICROLLM_CLI pointing at the built binary.
"""

import hashlib
import json
import os
import signal
import subprocess
import time

import numpy as np

CLI = os.environ.get("MICROLLM_CLI")


def launch(*args, timeout=60, env=None):
    assert CLI, "MICROLLM_CLI is not set"
    return subprocess.run([CLI, "launch", *map(str, args)], capture_output=True, text=True, timeout=timeout,
                          env=env)


def test_every_rank_gets_the_torchrun_environment(tmp_path):
    script = 'echo "$RANK $WORLD_SIZE $LOCAL_RANK $LOCAL_WORLD_SIZE $MASTER_ADDR $MASTER_PORT" > "$0/rank$RANK"'
    # Stale values in the launcher's environment are replaced, the rest is inherited.
    env = dict(os.environ, RANK="7", WORLD_SIZE="99", MICROLLM_TEST_MARK="kept")
    proc = launch("--nproc", 3, "--", "sh", "-c", script + '; echo "$MICROLLM_TEST_MARK" >> "$0/rank$RANK"',
                  tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr
    for r in range(3):
        lines = (tmp_path / f"rank{r}").read_text().split("\n")
        assert lines[0] == f"{r} 3 {r} 3 127.0.0.1 29500"
        assert lines[1] == "kept"
    # Node 1 of 2 with 2 processes each: global ranks 2 and 3.
    proc = launch("--nproc", 2, "--nnodes", 2, "--node-rank", 1, "--master", "10.1.2.3:1234", "--",
                  "sh", "-c", script, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "rank2").read_text().strip() == "2 4 0 2 10.1.2.3 1234"
    assert (tmp_path / "rank3").read_text().strip() == "3 4 1 2 10.1.2.3 1234"
    # IPv6 in brackets.
    proc = launch("--nproc", 1, "--master", "[::1]:29501", "--", "sh", "-c", script, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "rank0").read_text().strip() == "0 1 0 1 ::1 29501"


def test_a_failing_rank_stops_the_others_and_is_named(tmp_path):
    # Rank 2 fails at once; the others would sleep 30 s and then write a file.
    script = 'if [ "$RANK" = 2 ]; then exit 3; fi; sleep 30; touch "$0/finished$RANK"'
    start = time.monotonic()
    proc = launch("--nproc", 4, "--kill-timeout", 5, "--", "sh", "-c", script, tmp_path)
    elapsed = time.monotonic() - start
    assert elapsed < 20, f"{elapsed:.1f} s; stderr: {proc.stderr}"
    assert proc.returncode == 3, proc.stderr
    assert "rank 2 (local rank 2" in proc.stderr and "exited with status 3" in proc.stderr, proc.stderr
    assert "failed: rank 2" in proc.stderr
    assert not list(tmp_path.glob("finished*"))
    # A rank that ignores SIGTERM is killed after --kill-timeout. Rank 0 fails only once
    # rank 1 ignores SIGTERM.
    script = ('if [ "$RANK" = 0 ]; then while [ ! -e "$0/ignoring" ]; do sleep 0.05; done; exit 5; fi; '
              'trap "" TERM; touch "$0/ignoring"; '
              'i=0; while [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done; touch "$0/stubborn"')
    start = time.monotonic()
    proc = launch("--nproc", 2, "--kill-timeout", 1, "--", "sh", "-c", script, tmp_path)
    assert proc.returncode == 5, proc.stderr
    assert 1.0 <= time.monotonic() - start < 15
    assert not (tmp_path / "stubborn").exists()
    # What a stopped rank started is stopped with it: rank 1's background job ignores SIGTERM
    # and holds the launcher's output pipes, so the launcher's output ends only once it is
    # killed at --kill-timeout (else after its 30 s sleep).
    script = ('if [ "$RANK" = 0 ]; then while [ ! -e "$0/started" ]; do sleep 0.05; done; exit 4; fi; '
              '(trap "" TERM; touch "$0/started"; sleep 30; touch "$0/orphan") & wait')
    start = time.monotonic()
    proc = launch("--nproc", 2, "--kill-timeout", 1, "--", "sh", "-c", script, tmp_path)
    elapsed = time.monotonic() - start
    assert proc.returncode == 4, proc.stderr
    assert 1.0 <= elapsed < 15, f"{elapsed:.1f} s; stderr: {proc.stderr}"
    # A command that does not exist.
    proc = launch("--nproc", 2, "--", tmp_path / "no-such-program")
    assert proc.returncode == 127 and "cannot run" in proc.stderr, proc.stderr


def test_signals_are_forwarded_to_every_rank(tmp_path):
    script = 'trap "touch $0/got$RANK; exit 0" TERM; touch "$0/ready$RANK"; while true; do sleep 0.1; done'
    proc = subprocess.Popen([CLI, "launch", "--nproc", "3", "--", "sh", "-c", script, str(tmp_path)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 20
    while len(list(tmp_path.glob("ready*"))) < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 128 + signal.SIGTERM, stderr
    assert "forwarding" in stderr
    assert sorted(p.name for p in tmp_path.glob("got*")) == ["got0", "got1", "got2"]


def test_bad_launch_flags_are_one_error_line():
    for args, fragment in ((["--nnodes", 2, "--", "true"], "needs --master"),
                           (["--nnodes", 2, "--node-rank", 2, "--master", "h:1", "--", "true"], "--node-rank 2"),
                           (["--master", "nohost", "--", "true"], "is not ADDR:PORT"),
                           (["--master", "h:99999", "--", "true"], "is not in 1..65535")):
        proc = launch(*args)
        lines = [l for l in proc.stderr.splitlines() if l.strip()]
        assert proc.returncode != 0 and len(lines) == 1 and fragment in lines[0], proc.stderr
    assert launch("--nproc", 0, "--", "true").returncode != 0


def test_train_refuses_a_multi_rank_run_it_cannot_do(tmp_path):
    data = tmp_path / "train.bin"
    tokens = (np.arange(2000) % 32).astype("<u4")
    tokens.tofile(data)
    (tmp_path / "train.bin.json").write_text(json.dumps({
        "format": "microllm-tokens-v1", "dtype": "uint32", "count": int(tokens.size),
        "sha256": hashlib.sha256(tokens.tobytes()).hexdigest(), "vocab_size": 32}))
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"model_type": "qwen2", "vocab_size": 32, "hidden_size": 32,
                                  "intermediate_size": 48, "num_hidden_layers": 1, "num_attention_heads": 4,
                                  "num_key_value_heads": 2, "tie_word_embeddings": True}))
    train = [CLI, "train", "--config", config, "--data", data, "--steps", 1, "--batch", 2, "--seq", 8]
    # One rank by hand: WORLD_SIZE=2 on the CPU is one clear error naming the rank.
    env = dict(os.environ, WORLD_SIZE="2", RANK="1", MASTER_PORT="29555")
    proc = subprocess.run(list(map(str, train)), capture_output=True, text=True, timeout=60, env=env)
    lines = [l for l in proc.stderr.splitlines() if l.strip()]
    assert proc.returncode != 0 and len(lines) == 1, proc.stderr
    assert lines[0].startswith("microllm: error: rank 1:"), lines[0]
    assert "NCCL" in lines[0] or "--device cuda" in lines[0], lines[0]
    # --zero1 without ranks.
    proc = subprocess.run(list(map(str, train + ["--zero1"])), capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0 and "--zero1" in proc.stderr, proc.stderr
    # Through the launcher: it stops and names a failed rank.
    proc = launch("--nproc", 2, "--master", "127.0.0.1:29556", "--", "microllm", *train[1:])
    assert proc.returncode == 1, proc.stderr
    assert "failed: rank" in proc.stderr, proc.stderr
    # One process through the data-parallel path (--distributed at WORLD_SIZE=1) where it can
    # run, or the same clear error where it cannot.
    proc = subprocess.run(list(map(str, train + ["--distributed", "--device", "cuda"])), capture_output=True,
                          text=True, timeout=120)
    if proc.returncode != 0:
        assert "microllm: error: rank 0:" in proc.stderr, proc.stderr
