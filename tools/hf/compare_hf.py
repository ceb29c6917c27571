#!/usr/bin/env python3
"""Hugging Face transformers against microllm on the same checkpoint (GPU machine).

For each fixture config (tests/fixtures/configs/*; layer count reduced to --layers unless
named in --full), transformers builds the model with random weights (`from_config`, eager
attention, F32), saves it with `save_pretrained` (safetensors), and runs ids through it with
forward hooks on the embedding, every decoder layer, the final norm and the LM head, then
the loss (labels = ids, shifted inside transformers) and backward. microllm loads the saved
folder (`microllm_alignment model --model DIR --format safetensors`, passes `values` and
`training`) and captures the same stages and every parameter gradient.

Printed and written per model and dtype: max |Δ| and relative L2 per stage (embedding,
layers.{i}, final_norm, logits, last-token logits), the loss difference and, over all
parameter gradients, the worst max |Δ| relative to the gradient's largest element and the
worst relative L2. Bounds (SPEC §6): F32 logits max |Δ| ≤ --atol (1e-4), F32 gradients
≤ --grad-rtol relative to the largest element (CUDA: 5e-4, the CPU bound ×5). BF16 (both
sides in BF16 from the same F32 weights) is judged against the F32 result of the same
weights, since two BF16 implementations drift apart with depth while both stay near F32:
microllm's logits relative L2 to F32 ≤ --bf16-vs-hf (1.5) × transformers' BF16's + 1e-3, its
top-1 agreement with F32 ≥ transformers' − 0.02, and its worst gradient relative L2 to F32
≤ 1.5 × transformers' + 1e-3. The microllm-vs-transformers BF16 differences are printed too.

  python3 tools/hf/compare_hf.py --microllm-alignment build/.../microllm_alignment \\
      --device cuda --out $OUT/hf_compare.json [--full qwen2.5-0.5b] [--only NAME ...]
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

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures" / "configs"
sys.path.insert(0, str(REPO / "tools" / "alignment"))
from pytorch_runner import read_safetensors  # noqa: E402  (safetensors without the package)


def build_hf(cfg: dict, device: str, seed: int):
    torch.manual_seed(seed)
    config = transformers.AutoConfig.for_model(**cfg)
    config._attn_implementation = "eager"
    model = transformers.AutoModelForCausalLM.from_config(config)
    return model.to(device=device, dtype=torch.float32)


def hf_stages(model, ids: torch.Tensor) -> tuple[dict, torch.Tensor, dict]:
    """Named stage outputs, the loss and name → gradient, from hooks and one backward."""
    stages, hooks = {}, []

    def keep(name):
        def hook(module, inputs, output):
            out = output[0] if isinstance(output, tuple) else output
            stages[name] = out.detach().float().cpu()
        return hook

    hooks.append(model.model.embed_tokens.register_forward_hook(keep("embedding")))
    for i, layer in enumerate(model.model.layers):
        hooks.append(layer.register_forward_hook(keep(f"layers.{i}")))
    hooks.append(model.model.norm.register_forward_hook(keep("final_norm")))
    model.zero_grad(set_to_none=True)
    result = model(input_ids=ids, labels=ids)
    stages["logits"] = result.logits.detach().float().cpu()
    result.loss.backward()
    for h in hooks:
        h.remove()
    grads = {n: p.grad.detach().float().cpu() for n, p in model.named_parameters() if p.grad is not None}
    return stages, result.loss.detach().float().cpu(), grads


def run_microllm(args, folder: Path, dtype: str, work: Path) -> tuple[dict, torch.Tensor, dict, float]:
    start = time.time()
    for pass_name in ("values", "training"):
        proc = subprocess.run([args.microllm_alignment, "model", "--model", str(folder), "--ids", str(folder / "ids.npy"),
                               "--output", str(work), "--pass", pass_name, "--device", args.device, "--dtype", dtype,
                               "--format", "safetensors", "--warmup", "0", "--repetitions", "1"],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"microllm_alignment {pass_name}: {proc.stderr.strip()[-2000:]}")
    values = read_safetensors(work / "microllm_values.safetensors")
    training = read_safetensors(work / "microllm_training_values.safetensors")
    stages = {}
    for key, t in values.items():
        kind, rest = key.split(".", 1)
        name = rest.rsplit(".", 1)[0]
        if name in ("embedding", "final_norm", "logits"):
            stages[name] = t.float()
        elif name.startswith("layers.") and name.endswith(".output"):
            stages[name[: -len(".output")]] = t.float()
    loss = training["loss.loss.0"].float()
    grads = {k[len("gradient."):-2]: t.float() for k, t in training.items() if k.startswith("gradient.")}
    return stages, loss, grads, time.time() - start


def rel_l2(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / b.norm()) if float(b.norm()) > 0 else float((a - b).norm())


def compare(name: str, cfg: dict, args, dtype: str, tmp: Path) -> dict:
    row = {"model": name, "dtype": dtype, "layers": cfg["num_hidden_layers"], "batch": args.batch, "seq": args.seq}
    model = build_hf(cfg, args.device, args.seed)
    folder = tmp / f"{name}-{dtype}"
    model.save_pretrained(folder, safe_serialization=True)
    ids = np.random.default_rng(1).integers(0, cfg["vocab_size"], size=(args.batch, args.seq), dtype=np.int64)
    np.save(folder / "ids.npy", ids)
    f32_stages = f32_grads = None
    if dtype == "bf16":
        # The F32 result of the same weights: both BF16 runs are judged by their distance to it.
        f32_stages, _, f32_grads = hf_stages(model, torch.from_numpy(ids).to(args.device))
        model = model.to(torch.bfloat16)
    ref_stages, ref_loss, ref_grads = hf_stages(model, torch.from_numpy(ids).to(args.device))
    del model
    torch.cuda.empty_cache()
    try:
        got_stages, got_loss, got_grads, seconds = run_microllm(args, folder, dtype, tmp / f"{name}-{dtype}-out")
    except RuntimeError as e:
        row.update(status="FAIL", error=str(e))
        return row
    row["microllm_seconds"] = round(seconds, 1)
    problems = []
    stages = {}
    for stage, ref in ref_stages.items():
        if stage not in got_stages:
            problems.append(f"stage {stage} missing in microllm")
            continue
        got = got_stages[stage]
        if tuple(got.shape) != tuple(ref.shape):
            problems.append(f"stage {stage}: shape {tuple(got.shape)} vs {tuple(ref.shape)}")
            continue
        stages[stage] = {"max_abs": float((got - ref).abs().max()), "rel_l2": rel_l2(got, ref)}
    logits, ref_logits = got_stages["logits"], ref_stages["logits"]
    stages["last_token_logits"] = {"max_abs": float((logits[:, -1] - ref_logits[:, -1]).abs().max()),
                                   "rel_l2": rel_l2(logits[:, -1], ref_logits[:, -1])}
    row["stages"] = stages
    row["top1"] = float((logits.argmax(-1) == ref_logits.argmax(-1)).float().mean())
    row["loss"] = {"microllm": float(got_loss), "hf": float(ref_loss), "abs_diff": abs(float(got_loss) - float(ref_loss))}
    missing = sorted(set(ref_grads) ^ set(got_grads))
    if missing:
        problems.append(f"gradients present on one side only: {missing[:6]}")
    grad_rows = {}
    for pname in sorted(set(ref_grads) & set(got_grads)):
        g, r = got_grads[pname], ref_grads[pname]
        scale = max(float(r.abs().max()), 1e-30)
        grad_rows[pname] = {"max_abs_rel_to_max": float((g - r).abs().max()) / scale, "rel_l2": rel_l2(g, r)}
    worst_max = max(grad_rows.items(), key=lambda kv: kv[1]["max_abs_rel_to_max"])
    worst_l2 = max(grad_rows.items(), key=lambda kv: kv[1]["rel_l2"])
    row["gradients"] = {"count": len(grad_rows), "worst_max_abs_rel_to_max": worst_max[1]["max_abs_rel_to_max"],
                        "worst_max_abs_rel_to_max_at": worst_max[0], "worst_rel_l2": worst_l2[1]["rel_l2"],
                        "worst_rel_l2_at": worst_l2[0]}
    if dtype == "f32":
        if stages["logits"]["max_abs"] > args.atol:
            problems.append(f"logits max |Δ| {stages['logits']['max_abs']:.3g} > {args.atol}")
        if row["gradients"]["worst_max_abs_rel_to_max"] > args.grad_rtol:
            problems.append(f"gradient {worst_max[0]}: max |Δ| / max |g| {worst_max[1]['max_abs_rel_to_max']:.3g} "
                            f"> {args.grad_rtol}")
        if row["loss"]["abs_diff"] > args.atol:
            problems.append(f"loss |Δ| {row['loss']['abs_diff']:.3g} > {args.atol}")
    else:
        # BF16 against F32 on both sides: microllm's BF16 must be about as close to the F32
        # result as transformers' own BF16 is (factor --bf16-vs-hf), whatever the depth.
        ref32 = f32_stages["logits"]
        err = {"microllm": rel_l2(logits, ref32), "hf": rel_l2(ref_logits, ref32)}
        top1 = {"microllm": float((logits.argmax(-1) == ref32.argmax(-1)).float().mean()),
                "hf": float((ref_logits.argmax(-1) == ref32.argmax(-1)).float().mean())}
        shared = sorted(set(f32_grads) & set(got_grads) & set(ref_grads))
        grad_err = {"microllm": max(rel_l2(got_grads[n], f32_grads[n]) for n in shared),
                    "hf": max(rel_l2(ref_grads[n], f32_grads[n]) for n in shared)}
        row["vs_f32"] = {"logits_rel_l2": err, "top1": top1, "worst_grad_rel_l2": grad_err}
        bound = args.bf16_vs_hf * err["hf"] + 1e-3
        if err["microllm"] > bound:
            problems.append(f"logits relative L2 to F32 {err['microllm']:.3g} > {args.bf16_vs_hf} × HF BF16's "
                            f"{err['hf']:.3g} + 1e-3")
        if top1["microllm"] < top1["hf"] - 0.02:
            problems.append(f"top-1 agreement with F32 {top1['microllm']:.3f} < HF BF16's {top1['hf']:.3f} − 0.02")
        grad_bound = args.bf16_vs_hf * grad_err["hf"] + 1e-3
        if grad_err["microllm"] > grad_bound:
            problems.append(f"worst gradient relative L2 to F32 {grad_err['microllm']:.3g} > {args.bf16_vs_hf} × "
                            f"HF BF16's {grad_err['hf']:.3g} + 1e-3")
    row["problems"] = problems
    row["status"] = "FAIL" if problems else "PASS"
    return row


def vs_f32(row: dict) -> str:
    e = row.get("vs_f32", {}).get("logits_rel_l2")
    return f"{e['microllm']:.3g}/{e['hf']:.3g}" if e else "—"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--microllm-alignment", required=True, help="the microllm_alignment binary")
    p.add_argument("--device", default="cuda")
    p.add_argument("--layers", type=int, default=2, help="layer count of the reduced models")
    p.add_argument("--full", nargs="*", default=[], help="fixtures to also run at full size")
    p.add_argument("--only", nargs="*", default=[], help="run only these fixtures")
    p.add_argument("--dtypes", nargs="*", default=["f32", "bf16"])
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--seq", type=int, default=64)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--atol", type=float, default=1e-4)
    p.add_argument("--grad-rtol", type=float, default=5e-4)
    p.add_argument("--bf16-vs-hf", type=float, default=1.5,
                   help="BF16: microllm's distance to the F32 result may be this many times HF BF16's")
    p.add_argument("--out")
    args = p.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for fixture in sorted(FIXTURES.iterdir()):
            if not (fixture / "config.json").exists() or (args.only and fixture.name not in args.only):
                continue
            cfg = json.loads((fixture / "config.json").read_text())
            runs = [(fixture.name, dict(cfg, num_hidden_layers=min(args.layers, cfg["num_hidden_layers"])))]
            if fixture.name in args.full:
                runs.append((fixture.name + "-full", cfg))
            for name, c in runs:
                for dtype in args.dtypes:
                    try:
                        row = compare(name, c, args, dtype, Path(tmp))
                    except Exception as e:  # one broken configuration must not hide the others
                        row = {"model": name, "dtype": dtype, "status": "FAIL", "error": repr(e)[-2000:]}
                    rows.append(row)
                    print(json.dumps(row), flush=True)
    summary = {"transformers": transformers.__version__, "torch": torch.__version__, "device": args.device,
               "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
               "batch": args.batch, "seq": args.seq, "rows": rows}
    if args.out:
        Path(args.out).write_text(json.dumps(summary, indent=1))
    print(f"\n{'model':34} {'dtype':5} {'logits max|Δ|':>13} {'logits relL2':>12} {'top-1':>6} "
          f"{'loss |Δ|':>9} {'grad max/max':>12} {'grad relL2':>10} {'vs F32: ours/HF':>18}  status")
    for r in rows:
        s = r.get("stages", {}).get("logits", {})
        g = r.get("gradients", {})
        print(f"{r['model']:34} {r['dtype']:5} {s.get('max_abs', float('nan')):13.3g} {s.get('rel_l2', float('nan')):12.3g} "
              f"{r.get('top1', float('nan')):6.3f} {r.get('loss', {}).get('abs_diff', float('nan')):9.3g} "
              f"{g.get('worst_max_abs_rel_to_max', float('nan')):12.3g} {g.get('worst_rel_l2', float('nan')):10.3g} "
              f"{vs_f32(r):>18}  {r['status']} {'; '.join(r.get('problems', [])) or r.get('error', '')}")
    return 0 if rows and all(r["status"] == "PASS" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
