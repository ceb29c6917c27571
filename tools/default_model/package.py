#!/usr/bin/python3
"""Assembles the default model's folder from a finished training run and writes the training
record (kind "default-model", docs/default-model.md).

The folder (models/microllm-brown) holds config.json and model.safetensors as `microllm
train` wrote them, tokenizer.json and tokenizer_config.json from prepare_data.sh, and
generation_config.json (the sampling defaults below). Its identity is computed with
`microllm inspect --model`; --retrain-log gives the identities that the device printed for
the run and for a second run of the same command, and all three must agree.

The record: samples = the validation losses (nats per token) of the run's validation passes;
curve = every step's training loss and every validation loss; the command, seed and data
hashes (corpus manifest, text splits, token files, tokenizer); the identity; the sweep's
final validation losses when --sweep is given.

Usage: package.py --run RUN --data DATA --retrain-log LOG --gpu TEXT --commit SHA
                  [--model-file FILE] [--sweep DIR] [--out models/microllm-brown]
                  [--records-dir bench/records] [--microllm BIN] [--force]
"""

import argparse
import hashlib
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT / "tools" / "records"))
import record as records  # noqa: E402

# Sampling defaults: enough randomness to avoid the loops greedy decoding falls into on a
# small model, a nucleus that cuts the long tail, and a mild repetition penalty.
GENERATION_CONFIG = {
    "bos_token_id": 8189,
    "eos_token_id": 8189,
    "do_sample": True,
    "temperature": 0.8,
    "top_k": 50,
    "top_p": 0.95,
    "repetition_penalty": 1.1,
    "max_new_tokens": 200,
}


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def read_metrics(path):
    train, validation = [], []
    for line in Path(path).read_text().splitlines():
        m = json.loads(line)
        if "val_loss" in m:
            validation.append([m["step"], m["val_loss"]])
        else:
            train.append([m["step"], m["loss"]])
    return train, validation


def identity_of(microllm, folder):
    out = subprocess.run([microllm, "inspect", "--model", str(folder), "--json"], check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--run", type=Path, required=True, help="train.sh's OUT of the chosen run")
    p.add_argument("--data", type=Path, required=True, help="prepare_data.sh's OUT")
    p.add_argument("--retrain-log", type=Path, required=True,
                   help="device log with 'identity NAME HEX' lines for the run and its twin")
    p.add_argument("--gpu", required=True, help="nvidia-smi name and driver of the training GPU")
    p.add_argument("--commit", required=True, help="commit the training binary was built from")
    p.add_argument("--model-file", type=Path, help="model.safetensors (default RUN/run/...)")
    p.add_argument("--sweep", type=Path, help="sweep.sh's OUT, for the sweep summary")
    p.add_argument("--out", type=Path, default=ROOT / "models" / "microllm-brown")
    p.add_argument("--records-dir", type=Path, default=ROOT / "bench" / "records")
    p.add_argument("--microllm", default=str(ROOT / "build/cpu-release/apps/microllm/microllm"))
    p.add_argument("--force", action="store_true", help="replace an existing --out folder")
    a = p.parse_args(argv)

    if a.out.exists() and not a.force:
        sys.exit(f"package: {a.out} exists (pass --force to replace it)")
    a.out.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(a.run / "run" / "config.json", a.out / "config.json")
    shutil.copyfile(a.model_file or a.run / "run" / "model.safetensors", a.out / "model.safetensors")
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copyfile(a.data / "tokenizer" / name, a.out / name)
    with open(a.out / "generation_config.json", "w") as f:
        json.dump(GENERATION_CONFIG, f, indent=2)
        f.write("\n")

    inspected = identity_of(a.microllm, a.out)
    identity = inspected["identity"]
    device_ids = dict(re.findall(r"^identity (\S+) ([0-9a-f]{64})$",
                                 a.retrain_log.read_text(), re.M))
    if len(device_ids) < 2:
        sys.exit(f"package: {a.retrain_log} names {len(device_ids)} identities, expected 2")
    if set(device_ids.values()) != {identity}:
        sys.exit(f"package: identities differ: folder {identity}, device {device_ids}")

    train_curve, val_curve = read_metrics(a.run / "metrics.jsonl")
    manifest = json.loads((a.data / "text" / "manifest.json").read_text())
    token_files = {}
    for split in ("train", "validation", "test"):
        meta = json.loads((a.data / f"{split}.bin.json").read_text())
        token_files[split] = {"tokens": meta["count"], "sha256": meta["sha256"]}
    command = (a.run / "command.txt").read_text().split()
    config = json.loads((a.out / "config.json").read_text())
    flags = dict(zip(command[2::2], command[3::2]))  # microllm train --flag value ...
    sweep = {}
    if a.sweep:
        for log in sorted(a.sweep.glob("*/train.log")):
            m = re.search(r"^final val loss ([0-9.]+)", log.read_text(), re.M)
            tokens = (log.parent / "command.txt").read_text().split()
            cmd = dict(zip(tokens[2::2], tokens[3::2]))
            cfg_path = log.parent / "run" / "config.json"
            cfg = json.loads(cfg_path.read_text()) if cfg_path.exists() else {}
            sweep[log.parent.name] = {
                "final_val_loss": float(m.group(1)) if m else None,
                "steps": int(cmd["--steps"]), "lr": float(cmd["--lr"]),
                "layers": cfg.get("num_hidden_layers"), "hidden": cfg.get("hidden_size")}
    files = {f.name: {"bytes": f.stat().st_size, "sha256": sha256_file(f)}
             for f in sorted(a.out.iterdir())}
    final_val = val_curve[-1][1]
    rec = records.make_record(
        "default-model",
        {"case": "train", "model": str(a.out.relative_to(ROOT)), "model_config": config,
         "parameters": inspected["parameters"], "steps": int(flags["--steps"]),
         "batch": int(flags["--batch"]), "seq": int(flags["--seq"]), "lr": float(flags["--lr"]),
         "seed": int(flags["--seed"]), "device": flags["--device"], "dtype": flags["--dtype"],
         "eval_batches": int(flags["--eval-batches"])},
        [v for _, v in val_curve], "validation loss (nats/token)",
        command=command, host={"gpu": a.gpu}, git={"commit": a.commit, "dirty": False},
        extra={
            "curve": {"train": train_curve, "validation": val_curve},
            "final_validation_loss": final_val,
            "final_validation_perplexity": 2.718281828459045 ** final_val,
            "identity": identity,
            "retrain_identities": device_ids,
            "data": {"corpus": manifest["source"]["package"] + "@" + manifest["source"]["version"],
                     "inputs_sha256": manifest["source"]["inputs_sha256"],
                     "manifest_sha256": sha256_file(a.data / "text" / "manifest.json"),
                     "splits": {s: {k: manifest["splits"][s][k]
                                    for k in ("documents", "paragraphs", "words", "sha256")}
                                for s in manifest["splits"]},
                     "token_files": token_files,
                     "tokenizer_sha256": {n: sha256_file(a.data / "tokenizer" / n)
                                          for n in ("tokenizer.json", "tokenizer_config.json")}},
            "sweep": sweep,
            "folder": files,
            "folder_bytes": sum(f["bytes"] for f in files.values()),
        })
    path = records.write_record(rec, "train", a.records_dir)
    print(f"wrote {a.out} (identity {identity}) and {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
