#!/usr/bin/python3
"""The default model on the CPU: its test-split score and its generation speed, as records
(kind "default-model", docs/default-model.md).

  measure_cpu.py eval --data DATA       `microllm eval` on DATA/test.bin, once: the test split
                                        is scored after every choice (size, schedule,
                                        sampling defaults) was made on the validation split
  measure_cpu.py generate [--reps 5]    `microllm generate` (the default model, no --model)
                                        REPS times at a fixed seed; samples = decode tokens/s

Both run build/cpu-release's microllm (--microllm BIN) on this machine's cores, write one
record each to --records-dir (bench/records) and print it.
"""

import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT / "tools" / "records"))
import record as records  # noqa: E402

MODEL = ROOT / "models" / "microllm-brown"
PROMPT = "The history of the city"


def run(argv, env=None):
    result = subprocess.run(argv, capture_output=True, text=True, env=env)
    if result.returncode != 0:
        sys.exit(f"measure_cpu: {' '.join(argv)} failed ({result.returncode}): "
                 f"{result.stderr.strip()[-500:]}")
    return result


def identity(microllm):
    out = run([microllm, "inspect", "--model", str(MODEL), "--json"]).stdout
    return json.loads(out)["identity"]


def do_eval(a):
    windows_per_batch, batches, seq = 8, 32, 256
    argv = [a.microllm, "eval", "--model", str(MODEL), "--data", str(a.data / "test.bin"),
            "--seq", str(seq), "--batch", str(windows_per_batch), "--batches", str(batches),
            "--seed", "0", "--json"]
    out = json.loads(run(argv).stdout)
    rec = records.make_record(
        "default-model",
        {"case": "test-eval", "model": "models/microllm-brown", "data": "test.bin",
         "data_sha256": out["data_sha256"], "seq": seq, "windows": windows_per_batch * batches,
         "device": "cpu", "dtype": "f32", "identity": identity(a.microllm)},
        [out["loss"]], "test loss (nats/token)", command=argv,
        extra={"perplexity": out["perplexity"],
               "note": "the test split is scored once, after the model size, schedule and "
                       "sampling defaults were chosen on the validation split"})
    print(records.write_record(rec, "test-eval", a.records_dir))
    print(json.dumps(out, indent=2))


def do_generate(a):
    env = dict(os.environ)
    env.pop("MICROLLM_MODEL", None)  # the default model
    argv = [a.microllm, "generate", "--prompt", PROMPT, "--max-new-tokens", "128", "--seed", "7",
            "--json"]
    rates, lengths, text = [], [], None
    for _ in range(a.reps):
        result = run(argv, env)
        m = re.search(r"(\d+) tokens in ([0-9.]+) s; time to first token ([0-9.]+) ms; "
                      r"decode ([0-9.]+) tokens/s", result.stderr)
        if not m:
            sys.exit(f"measure_cpu: no timing line in: {result.stderr.strip()[-300:]}")
        rates.append(float(m.group(4)))
        lengths.append(int(m.group(1)))
        text = json.loads(result.stdout.splitlines()[-1])["text"]
    rec = records.make_record(
        "default-model",
        {"case": "cpu-generate", "model": "models/microllm-brown", "prompt": PROMPT,
         "max_new_tokens": 128, "seed": 7, "device": "cpu", "dtype": "f32",
         "threads": os.cpu_count(), "identity": identity(a.microllm)},
        rates, "decode tokens/s", command=argv, higher_is_better=True,
        extra={"generated_tokens": lengths, "text": text})
    print(records.write_record(rec, "cpu-generate", a.records_dir))
    print(f"decode tokens/s: {rates}; text: {text!r}")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("what", choices=["eval", "generate"])
    p.add_argument("--data", type=Path, help="prepare_data.sh's OUT (eval)")
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--microllm", default=str(ROOT / "build/cpu-release/apps/microllm/microllm"))
    p.add_argument("--records-dir", type=Path, default=ROOT / "bench" / "records")
    a = p.parse_args(argv)
    if a.what == "eval":
        if a.data is None:
            p.error("eval needs --data")
        do_eval(a)
    else:
        do_generate(a)
    return 0


if __name__ == "__main__":
    sys.exit(main())
