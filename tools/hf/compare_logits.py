#!/usr/bin/env python3
"""Hugging Face transformers against microllm on the same checkpoint (GPU machine).

For each fixture config (layer count reduced unless --full), transformers builds the model
with random weights (`from_config`, eager attention, F32), saves it with `save_pretrained`
(safetensors), and computes logits for random ids; `microllm forward` loads the saved
folder and computes logits for the same ids. F32: max |Δ| ≤ --atol (SPEC §6: 1e-4).
BF16 (both sides in BF16): relative L2 error and top-1 agreement are reported and checked
against --bf16-rel-l2 / --bf16-top1.

  python3 tools/hf/compare_logits.py --microllm build/cuda-release/apps/microllm/microllm \
      --device cuda --out $OUT/hf_compare.json [--full qwen2.5-0.5b]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import transformers

FIXTURES = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "configs"


def compare(name: str, cfg: dict, args, dtype: str, tmp: Path) -> dict:
    torch.manual_seed(0)
    config = transformers.AutoConfig.for_model(**cfg)
    config._attn_implementation = "eager"
    torch_dtype = torch.float32 if dtype == "f32" else torch.bfloat16
    model = transformers.AutoModelForCausalLM.from_config(config, torch_dtype=torch_dtype)
    model = model.to(args.device).eval()
    folder = tmp / f"{name}-{dtype}"
    model.save_pretrained(folder, safe_serialization=True)
    rng = np.random.default_rng(1)
    ids = rng.integers(0, cfg["vocab_size"], size=(args.batch, args.seq), dtype=np.int64)
    np.save(folder / "ids.npy", ids)
    with torch.no_grad():
        ref = model(torch.from_numpy(ids).to(args.device)).logits.float().cpu()
    start = time.time()
    proc = subprocess.run([args.microllm, "forward", "--model", str(folder), "--ids", str(folder / "ids.npy"),
                           "--out", str(folder / "logits.npy"), "--device", args.device, "--dtype", dtype],
                          capture_output=True, text=True)
    row = {"model": name, "dtype": dtype, "layers": cfg["num_hidden_layers"], "batch": args.batch,
           "seq": args.seq, "microllm_seconds": round(time.time() - start, 2)}
    if proc.returncode != 0:
        row.update(status="FAIL", error=proc.stderr.strip()[-2000:])
        return row
    got = torch.from_numpy(np.load(folder / "logits.npy"))
    diff = (got - ref).abs()
    rel_l2 = float((got - ref).norm() / ref.norm())
    top1 = float((got.argmax(-1) == ref.argmax(-1)).float().mean())
    row.update(max_abs=float(diff.max()), rel_l2=rel_l2, top1=top1, logits_max=float(ref.abs().max()))
    if dtype == "f32":
        ok = row["max_abs"] <= args.atol
    else:
        ok = rel_l2 <= args.bf16_rel_l2 and top1 >= args.bf16_top1
    row["status"] = "PASS" if ok else "FAIL"
    return row


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--microllm", required=True)
    p.add_argument("--device", default="cuda")
    p.add_argument("--layers", type=int, default=2, help="layer count of the reduced models")
    p.add_argument("--full", nargs="*", default=[], help="fixtures to also run at full size")
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--seq", type=int, default=64)
    p.add_argument("--atol", type=float, default=1e-4)
    p.add_argument("--bf16-rel-l2", type=float, default=2e-2)
    p.add_argument("--bf16-top1", type=float, default=0.9)
    p.add_argument("--out")
    args = p.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for fixture in sorted(FIXTURES.iterdir()):
            if not (fixture / "config.json").exists():
                continue
            cfg = json.loads((fixture / "config.json").read_text())
            runs = [(fixture.name, dict(cfg, num_hidden_layers=min(args.layers, cfg["num_hidden_layers"])))]
            if fixture.name in args.full:
                runs.append((fixture.name + "-full", cfg))
            for name, c in runs:
                for dtype in ("f32", "bf16"):
                    row = compare(name, c, args, dtype, Path(tmp))
                    rows.append(row)
                    print(json.dumps(row), flush=True)
    summary = {"transformers": transformers.__version__, "torch": torch.__version__, "device": args.device,
               "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None, "rows": rows}
    if args.out:
        Path(args.out).write_text(json.dumps(summary, indent=2))
    print(f"{'model':38} {'dtype':5} {'max|Δ|':>10} {'rel L2':>10} {'top-1':>6}  status")
    for r in rows:
        print(f"{r['model']:38} {r['dtype']:5} {r.get('max_abs', float('nan')):10.3g} "
              f"{r.get('rel_l2', float('nan')):10.3g} {r.get('top1', float('nan')):6.3f}  {r['status']}")
    return 0 if all(r["status"] == "PASS" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
