#!/usr/bin/env python3
"""Model alignment, one command: the same model in microllm and in PyTorch, four passes.

  python3 tools/alignment/run.py \\
    --microllm-binary build/<preset>/apps/microllm_alignment/microllm_alignment \\
    --python /path/to/python-with-torch --output OUTDIR \\
    --microllm-device cpu|cuda --pytorch-device cpu|cuda --warmup 5 --repetitions 20 \\
    --atol 3e-5 --rtol 3e-5 [--config tests/fixtures/…/config.json] [--layers N] \\
    [--dtype f32|bf16] [--max-captured-elements N] [--partial] [--overwrite]

The model is a tiny Qwen2-style model with a fixed seed unless --config names another
(--layers reduces its layer count, and the manifest says so). microllm builds it with
random weights and writes its named parameters as a Hugging Face folder
(OUTDIR/parameters); every later microllm pass loads that folder and the PyTorch runner
(tools/alignment/pytorch_runner.py) rebuilds the architecture from it, so both sides hold
the exact same weights. Passes, each its own process per side:
  1. values           ids, every named forward value, layer outputs, logits
  2. operator-timing  value capture off; the time of each named value
  3. layer-timing     operator timers off; embedding, blocks, final norm, LM head, forward
  4. training         loss and every parameter gradient; then backward timed alone
Then tools/alignment/compare.py writes comparison.json and report.md. OUTDIR also gets
manifest.json, microllm_run.json, pytorch_run.json and logs/. Exit status: 0 when every stage
ran and the comparison passed; 1 otherwise (the manifest names the failed stage); 2 for bad
arguments (missing binary or python, an OUTDIR that holds results without --overwrite).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO / "tools" / "records"))
import record  # noqa: E402  (git state, host information)

PASSES = ["values", "operator-timing", "layer-timing", "training"]
# A tiny Qwen2-style model (QKV bias, GQA, tied head): small enough for CI, every piece present.
TINY_CONFIG = {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "vocab_size": 256,
               "hidden_size": 64, "intermediate_size": 176, "num_hidden_layers": 2,
               "num_attention_heads": 4, "num_key_value_heads": 2, "rms_norm_eps": 1e-6,
               "rope_theta": 1000000.0, "tie_word_embeddings": True, "max_position_embeddings": 128,
               "hidden_act": "silu", "torch_dtype": "float32"}
ARTIFACTS = ["manifest.json", "microllm_run.json", "pytorch_run.json", "microllm_parameters.jsonl",
             "comparison.json", "report.md", "config.json", "ids.npy"] + [
    f"{side}_{stem}.jsonl" for side in ("microllm", "pytorch")
    for stem in ("values", "operator_timing", "layer_timing", "training_values", "backward_timing")]


class UsageError(Exception):
    pass


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--microllm-binary", required=True)
    p.add_argument("--python", default=sys.executable, help="interpreter with torch and numpy")
    p.add_argument("--output", required=True)
    p.add_argument("--microllm-device", default="cpu")
    p.add_argument("--pytorch-device", default="cpu")
    p.add_argument("--dtype", default="f32", choices=["f32", "bf16"])
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--repetitions", type=int, default=20)
    p.add_argument("--atol", type=float, default=3e-5)
    p.add_argument("--rtol", type=float, default=3e-5)
    p.add_argument("--config", help="config.json of the model (default: a tiny Qwen2-style model)")
    p.add_argument("--layers", type=int, help="reduce the model to this many layers")
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--seq", type=int, default=16)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--init-std", type=float, default=0.02)
    p.add_argument("--max-captured-elements", type=int, default=1 << 20)
    p.add_argument("--partial", action="store_true", help="accept truncated captures")
    p.add_argument("--overwrite", action="store_true", help="replace the results already in OUTDIR")
    return p.parse_args(argv)


def check_arguments(args) -> None:
    binary = Path(args.microllm_binary)
    if not binary.is_file() or not os.access(binary, os.X_OK):
        raise UsageError(f"--microllm-binary {binary}: no such executable (build the microllm_alignment target)")
    if shutil.which(args.python) is None and not (Path(args.python).is_file() and os.access(args.python, os.X_OK)):
        raise UsageError(f"--python {args.python}: no such interpreter")
    if args.config and not Path(args.config).is_file():
        raise UsageError(f"--config {args.config}: no such file")
    if args.warmup < 0 or args.repetitions < 1 or args.max_captured_elements < 1:
        raise UsageError("--warmup must be ≥ 0, --repetitions ≥ 1 and --max-captured-elements ≥ 1")
    out = Path(args.output)
    if out.exists() and not out.is_dir():
        raise UsageError(f"--output {out} exists and is not a folder")
    present = [name for name in ARTIFACTS + ["logs", "parameters"] if (out / name).exists()]
    if present and not args.overwrite:
        raise UsageError(f"--output {out} already holds results ({', '.join(present[:4])}"
                         f"{', …' if len(present) > 4 else ''}); pass --overwrite to replace them")
    for name in present:
        target = out / name
        shutil.rmtree(target) if target.is_dir() else target.unlink()


def model_config(args) -> tuple[dict, str]:
    if args.config:
        cfg = json.loads(Path(args.config).read_text())
        name = str(args.config)
    else:
        cfg, name = dict(TINY_CONFIG), "tiny qwen2-style (built in)"
    if args.layers is not None:
        if not 1 <= args.layers <= cfg["num_hidden_layers"]:
            raise UsageError(f"--layers {args.layers}: the model has {cfg['num_hidden_layers']} layers")
        if args.layers < cfg["num_hidden_layers"]:
            name += f", reduced from {cfg['num_hidden_layers']} to {args.layers} layers"
            cfg["num_hidden_layers"] = args.layers
    return cfg, name


class Stage:
    """Runs commands, appends their output to logs/<side>.{stdout,stderr}.txt, keeps return codes."""

    def __init__(self, out: Path):
        self.out = out
        self.results: list = []
        (out / "logs").mkdir(parents=True, exist_ok=True)

    def run(self, side: str, name: str, argv: list) -> dict:
        start = time.time()
        proc = subprocess.run(argv, capture_output=True, text=True)
        for stream, text in (("stdout", proc.stdout), ("stderr", proc.stderr)):
            with (self.out / "logs" / f"{side}.{stream}.txt").open("a") as f:
                f.write(f"==== {name}: {' '.join(argv)}\n{text}")
        reported = None
        for line in reversed(proc.stdout.strip().splitlines()):
            if line.startswith("{"):
                try:
                    reported = json.loads(line)
                except json.JSONDecodeError:
                    pass
                break
        result = {"side": side, "stage": name, "argv": argv, "returncode": proc.returncode,
                  "seconds": round(time.time() - start, 3), "reported": reported}
        if proc.returncode != 0:
            result["stderr_tail"] = proc.stderr.strip()[-2000:]
        self.results.append(result)
        return result


def probe_python(python: str) -> dict:
    code = "import json, sys, numpy, torch; print(json.dumps({'python': sys.version.split()[0], " \
           "'torch': torch.__version__, 'numpy': numpy.__version__, 'cuda': torch.cuda.is_available()}))"
    proc = subprocess.run([python, "-c", code], capture_output=True, text=True)
    if proc.returncode != 0:
        return {"error": proc.stderr.strip()[-1000:] or f"exit {proc.returncode}"}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def main(argv=None) -> int:
    args = parse_args(argv)
    try:
        check_arguments(args)
        cfg, model_name = model_config(args)
    except UsageError as e:
        print(f"alignment: error: {e}", file=sys.stderr)
        return 2
    out = Path(args.output)
    out.mkdir(parents=True, exist_ok=True)
    stage = Stage(out)
    manifest = {
        "tool": "tools/alignment/run.py", "created_utc": record.utc_now().strftime("%Y-%m-%dT%H:%M:%SZ"),
        "git": record.git_state(), "command": [sys.executable] + sys.argv if argv is None else argv,
        "host": {"platform": platform.platform(), "cpu": record.cpu_name(), "python_driver": sys.version.split()[0]},
        "microllm_binary": {"path": str(Path(args.microllm_binary).resolve()),
                            "sha256": sha256(Path(args.microllm_binary))},
        "model": model_name, "config": cfg, "dtype": args.dtype, "seed": args.seed, "init_std": args.init_std,
        "batch": args.batch, "seq": args.seq, "microllm_device": args.microllm_device,
        "pytorch_device": args.pytorch_device, "warmup": args.warmup, "repetitions": args.repetitions,
        "max_captured_elements": args.max_captured_elements, "atol": args.atol, "rtol": args.rtol,
        "partial": args.partial, "stages": stage.results, "failed_stage": None, "artifacts": []}

    def finish(status: int) -> int:
        manifest["artifacts"] = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())
        if "manifest.json" not in manifest["artifacts"]:
            manifest["artifacts"].append("manifest.json")
        (out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
        for side in ("microllm", "pytorch"):
            (out / f"{side}_run.json").write_text(json.dumps(
                [r for r in stage.results if r["side"] == side], indent=1) + "\n")
        return status

    def failed(name: str, why: str) -> int:
        manifest["failed_stage"] = name
        print(f"alignment: stage {name} failed: {why} (logs in {out / 'logs'})", file=sys.stderr)
        finish(1)
        return 1

    versions = probe_python(args.python)
    manifest["host"]["pytorch_python"] = versions
    stage.results.append({"side": "pytorch", "stage": "import", "argv": [args.python, "-c", "import torch"],
                          "returncode": 1 if "error" in versions else 0, "reported": versions})
    if "error" in versions:
        return failed("pytorch-import", f"{args.python} cannot import torch and numpy: {versions['error']}")
    manifest["host"]["gpu"] = record.gpu_query() if "cuda" in (args.microllm_device + args.pytorch_device) else None

    (out / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    ids = np.random.default_rng(args.seed).integers(0, cfg["vocab_size"], size=(args.batch, args.seq), dtype=np.int64)
    np.save(out / "ids.npy", ids)
    common = ["--ids", str(out / "ids.npy"), "--output", str(out), "--warmup", str(args.warmup),
              "--repetitions", str(args.repetitions), "--max-captured-elements", str(args.max_captured_elements),
              "--dtype", args.dtype]
    parameters = out / "parameters"
    for name in PASSES:
        source = (["--config", str(out / "config.json"), "--seed", str(args.seed), "--init-std", str(args.init_std),
                   "--write-parameters", str(parameters)] if name == "values" else ["--model", str(parameters)])
        r = stage.run("microllm", name, [args.microllm_binary, "model", "--pass", name,
                                         "--device", args.microllm_device] + source + common)
        if r["returncode"] != 0:
            return failed(f"microllm {name}", r.get("stderr_tail", ""))
    for name in PASSES:
        r = stage.run("pytorch", name, [args.python, str(HERE / "pytorch_runner.py"), "--pass", name,
                                        "--parameters", str(parameters), "--device", args.pytorch_device] + common)
        if r["returncode"] != 0:
            return failed(f"pytorch {name}", r.get("stderr_tail", ""))
    # The manifest is written before the comparison so the report can quote it.
    finish(0)
    r = stage.run("compare", "compare", [args.python, str(HERE / "compare.py"), "--output", str(out),
                                         "--atol", str(args.atol), "--rtol", str(args.rtol)]
                  + (["--partial"] if args.partial else []))
    sys.stdout.write((out / "report.md").read_text().split("\n## Worst")[0] + "\n" if (out / "report.md").exists() else "")
    if r["returncode"] != 0:
        return failed("compare", "the comparison found differences (report.md)"
                      if (out / "comparison.json").exists() else r.get("stderr_tail", ""))
    return finish(0)


if __name__ == "__main__":
    sys.exit(main())
