#!/usr/bin/env python3
"""The cases of microllm_bench_ops (bench/ops/bench_ops.cpp) in PyTorch, timed the same way.

Prints one JSON document on stdout with the same shape (schema microllm-bench-ops-v1,
"tool": "torch"), so bench/ops/run_ops_bench.py can pair the cases by name. Method: random
inputs (torch.randn on the GPU, never zeros), warm-up, then one pair of torch.cuda.Event per
repetition on the current stream; inputs rotate over several sets when a case moves less
than 2 × L2 (the same rule as the C++ driver). Bytes and FLOPs use the same formulas.

PyTorch paths: GEMM F.linear (x · wᵀ, TF32 off for F32); RMSNorm F.rms_norm (or the
Hugging Face formula with --rms-norm hf); torch.softmax; attention
F.scaled_dot_product_attention(is_causal=True, enable_gqa=True) (or repeat_interleave of the
KV heads inside the timed call with --gqa repeat); a + b; SwiGLU F.silu(g) * u.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass, field
from typing import Any, Callable

# Measured ceilings on the H200 used here (SPEC §8, GPU.md).
COPY_TBPS = 4.25
BF16_GEMM_TFLOPS = 794.0
F32_GEMM_TFLOPS = 51.0
L2_BYTES = 50.0 * 1024 * 1024
MAX_INPUT_SETS = 8


@dataclass
class Case:
    name: str
    family: str
    dtype: str
    shape: dict[str, Any]
    bytes: float
    flops: float
    input_bytes: float
    formula: str
    bound: str
    ceiling: float
    ceiling_name: str
    setup: Callable[[int], Callable[[int], None]]
    needs_grad: bool = False
    notes: str = ""
    extra: dict[str, Any] = field(default_factory=dict)
    max_input_sets: int = MAX_INPUT_SETS  # decode cases rotate more: small weights fit in L2


def _torch():
    import torch  # imported lazily: --list works without torch
    return torch


def _dtype(label: str):
    torch = _torch()
    return torch.bfloat16 if label == "bf16" else torch.float32


def _es(label: str) -> float:
    return 2.0 if label == "bf16" else 4.0


class RandomSource:
    """torch.randn on cuda:0 from one seeded generator: every input set differs."""

    def __init__(self, seed: int):
        self.seed = seed
        self.gen = None

    def normal(self, shape, label: str):
        torch = _torch()
        if self.gen is None:
            self.gen = torch.Generator(device="cuda").manual_seed(self.seed)
        return torch.randn(shape, generator=self.gen, device="cuda", dtype=_dtype(label))


def gemm_case(rng, label, M, N, K, dt) -> Case:
    es = _es(dt)

    def setup(sets):
        F = _torch().nn.functional
        x = [rng.normal((M, K), dt) for _ in range(sets)]  # (M, K) activations
        w = [rng.normal((N, K), dt) for _ in range(sets)]  # (N, K) weight
        return lambda i: F.linear(x[i], w[i])

    input_bytes = es * (M * K + N * K)
    return Case(
        name=f"gemm_{dt}{'_' + label if label else ''}_{M}x{N}x{K}", family="gemm", dtype=dt,
        shape={"M": M, "N": N, "K": K}, input_bytes=input_bytes,
        bytes=input_bytes + es * M * N, flops=2.0 * M * N * K,
        formula=f"out (M,N) = x (M,K) · w (N,K)ᵀ [F.linear]; bytes = {int(es)}·(M·K + N·K + M·N); "
                "flops = 2·M·N·K",
        bound="compute", ceiling=BF16_GEMM_TFLOPS if dt == "bf16" else F32_GEMM_TFLOPS,
        ceiling_name="bf16_gemm_tflops" if dt == "bf16" else "f32_gemm_tflops", setup=setup,
        notes="TF32 off (allow_tf32 = False, matmul precision 'highest')" if dt == "f32" else "")


def rms_norm_case(rng, R, C, dt, impl) -> Case:
    es = _es(dt)

    def setup(sets):
        torch = _torch()
        F = torch.nn.functional
        x = [rng.normal((R, C), dt) for _ in range(sets)]  # (R, C)
        w = [rng.normal((C,), dt) for _ in range(sets)]    # (C)
        if impl == "fused":
            return lambda i: F.rms_norm(x[i], (C,), w[i], eps=1e-6)

        def hf(i):  # transformers' Qwen2RMSNorm.forward
            h = x[i].to(torch.float32)
            variance = h.pow(2).mean(-1, keepdim=True)
            h = h * torch.rsqrt(variance + 1e-6)
            return w[i] * h.to(x[i].dtype)
        return hf

    input_bytes = es * (R * C + C)
    return Case(
        name=f"rms_norm_{dt}_{R}x{C}", family="rms_norm", dtype=dt, shape={"rows": R, "C": C},
        input_bytes=input_bytes, bytes=input_bytes + es * R * C, flops=4.0 * R * C,
        formula="y = x · rsqrt(mean(x²) + 1e-6) · w; bytes = es·(2·R·C + C); flops ≈ 4·R·C",
        bound="memory", ceiling=COPY_TBPS, ceiling_name="copy_tbps", setup=setup,
        notes="F.rms_norm" if impl == "fused" else "Hugging Face Qwen2RMSNorm formula (unfused)")


def softmax_case(rng, R, C, dt) -> Case:
    es = _es(dt)

    def setup(sets):
        torch = _torch()
        x = [rng.normal((R, C), dt) for _ in range(sets)]  # (R, C)
        return lambda i: torch.softmax(x[i], dim=-1)

    return Case(
        name=f"softmax_{dt}_{R}x{C}", family="softmax", dtype=dt, shape={"rows": R, "C": C},
        input_bytes=es * R * C, bytes=2.0 * es * R * C, flops=5.0 * R * C,
        formula="softmax over the last dim; bytes = es·2·R·C; flops ≈ 5·R·C (max, sub, exp, sum, div)",
        bound="memory", ceiling=COPY_TBPS, ceiling_name="copy_tbps", setup=setup)


def attention_case(rng, B, H, Hkv, T, D, backward, gqa) -> Case:
    """Causal GQA attention at (B, H, Hkv, T, D)."""
    es = 2.0
    q_elems, kv_elems = B * H * T * D, B * Hkv * T * D
    forward_flops = 2.0 * B * H * T * T * D

    def setup(sets):
        torch = _torch()
        F = torch.nn.functional
        q = [rng.normal((B, H, T, D), "bf16") for _ in range(sets)]    # (B, H, T, D)
        k = [rng.normal((B, Hkv, T, D), "bf16") for _ in range(sets)]  # (B, Hkv, T, D)
        v = [rng.normal((B, Hkv, T, D), "bf16") for _ in range(sets)]  # (B, Hkv, T, D)

        def sdpa(i):
            if gqa == "repeat":  # Hugging Face's repeat_kv: (B, Hkv, T, D) → (B, H, T, D)
                kk = k[i].repeat_interleave(H // Hkv, dim=1)
                vv = v[i].repeat_interleave(H // Hkv, dim=1)
                return F.scaled_dot_product_attention(q[i], kk, vv, is_causal=True)
            return F.scaled_dot_product_attention(q[i], k[i], v[i], is_causal=True,
                                                  enable_gqa=True)

        if not backward:
            return sdpa
        dout = [rng.normal((B, H, T, D), "bf16") for _ in range(sets)]  # (B, H, T, D)
        for t in q + k + v:
            t.requires_grad_(True)

        def forward_backward(i):
            sdpa(i).backward(dout[i])
            # Drop the gradients so the next repetition writes fresh ones (set_to_none).
            q[i].grad = k[i].grad = v[i].grad = None
        return forward_backward

    if not backward:
        input_bytes = es * (q_elems + 2 * kv_elems)
        total, flops = input_bytes + es * q_elems, forward_flops
        formula = ("causal GQA; bytes = 2·(2·B·H·T·D + 2·B·Hkv·T·D) (q, k, v read, o written); "
                   "flops = 2·B·H·T²·D (Q·Kᵀ and P·V, 4·B·H·T²·D, half under the causal mask)")
    else:
        input_bytes = es * (2 * q_elems + 2 * kv_elems)
        total, flops = 2.0 * input_bytes, 3.5 * forward_flops
        formula = ("causal GQA forward + backward; bytes = 2·(4·B·H·T·D + 4·B·Hkv·T·D) (q, k, v, "
                   "dO read; o, dq, dk, dv written); flops = 7·B·H·T²·D (forward 2·B·H·T²·D, "
                   "backward 2.5× forward, as FlashAttention counts)")
    family = "attention_fwdbwd" if backward else "attention_fwd"
    notes = ("F.scaled_dot_product_attention(is_causal=True, enable_gqa=True), default backend choice"
             if gqa == "enable_gqa" else
             "F.scaled_dot_product_attention(is_causal=True) after repeat_interleave of K and V "
             "inside the timed call")
    return Case(
        name=f"{family}_bf16_b{B}_h{H}_kv{Hkv}_t{T}_d{D}", family=family, dtype="bf16",
        shape={"B": B, "H": H, "Hkv": Hkv, "T": T, "D": D, "causal": True},
        input_bytes=input_bytes, bytes=total, flops=flops, formula=formula, bound="compute",
        ceiling=BF16_GEMM_TFLOPS, ceiling_name="bf16_gemm_tflops", setup=setup,
        needs_grad=backward, notes=notes)


def add_case(rng, R, C, dt) -> Case:
    es = _es(dt)

    def setup(sets):
        a = [rng.normal((R, C), dt) for _ in range(sets)]  # (R, C)
        b = [rng.normal((R, C), dt) for _ in range(sets)]  # (R, C)
        return lambda i: a[i] + b[i]

    return Case(
        name=f"add_{dt}_64m", family="add", dtype=dt, shape={"rows": R, "C": C, "elements": R * C},
        input_bytes=es * 2.0 * R * C, bytes=es * 3.0 * R * C, flops=float(R * C),
        formula="out = a + b; bytes = es·3·N; flops = N", bound="memory", ceiling=COPY_TBPS,
        ceiling_name="copy_tbps", setup=setup)


def swiglu_case(rng, R, Fw) -> Case:
    def setup(sets):
        F = _torch().nn.functional
        gate = [rng.normal((R, Fw), "bf16") for _ in range(sets)]  # (R, F)
        up = [rng.normal((R, Fw), "bf16") for _ in range(sets)]    # (R, F)
        return lambda i: F.silu(gate[i]) * up[i]

    return Case(
        name=f"swiglu_bf16_{R}x{Fw}", family="swiglu", dtype="bf16", shape={"rows": R, "F": Fw},
        input_bytes=2.0 * 2.0 * R * Fw, bytes=2.0 * 3.0 * R * Fw, flops=5.0 * R * Fw,
        formula="out = silu(gate) · up; bytes = 2·3·R·F; flops ≈ 5·R·F (neg, exp, add, div, mul)",
        bound="memory", ceiling=COPY_TBPS, ceiling_name="copy_tbps", setup=setup,
        notes="F.silu(gate) * up (two kernels, eager)")


def gemv_case(rng, label, M, N, K, swiglu) -> Case:
    """The decode projection at M rows through F.linear (cuBLAS), with swiglu the fused
    gate/up weight (2N, K) split after the product, as a PyTorch decode step computes it."""
    rows = 2 * N if swiglu else N

    def setup(sets):
        F = _torch().nn.functional
        x = [rng.normal((M, K), "bf16") for _ in range(sets)]     # (M, K)
        w = [rng.normal((rows, K), "bf16") for _ in range(sets)]  # (rows, K)
        if not swiglu:
            return lambda i: F.linear(x[i], w[i])

        def fused(i):
            gate, up = F.linear(x[i], w[i]).chunk(2, dim=-1)
            return F.silu(gate) * up
        return fused

    input_bytes = 2.0 * (M * K + rows * K)
    return Case(
        name=f"gemv_bf16_{label}_m{M}_{rows}x{K}", family="gemv", dtype="bf16",
        shape={"M": M, "N": rows, "K": K, "swiglu": swiglu}, input_bytes=input_bytes,
        bytes=input_bytes + 2.0 * M * N, flops=2.0 * M * rows * K,
        formula=("out (M,N) = silu(x·gateᵀ)·(x·upᵀ), w (2N,K) = [gate; up]" if swiglu
                 else "out (M,N) = x (M,K) · w (N,K)ᵀ") + "; bytes = 2·(M·K + rows·K + M·N); flops = 2·M·rows·K",
        bound="memory", ceiling=COPY_TBPS, ceiling_name="copy_tbps", setup=setup, max_input_sets=160,
        notes="F.linear (cuBLAS)" + (", chunk, F.silu(gate) * up" if swiglu else ""))


def gemv_cases(rng) -> list[Case]:
    """The decode projections of the Qwen2.5-0.5B and DeepSeek-R1-Distill-Qwen-1.5B shapes."""
    cases = []
    for name, C, Fw, qkv in (("qwen0.5b", 896, 4864, 1152), ("r1d1.5b", 1536, 8960, 2048)):
        for M in (1, 4, 8):
            cases += [gemv_case(rng, f"{name}_qkv", M, qkv, C, False),
                      gemv_case(rng, f"{name}_o", M, C, C, False),
                      gemv_case(rng, f"{name}_gate_up", M, Fw, C, True),
                      gemv_case(rng, f"{name}_down", M, C, Fw, False),
                      gemv_case(rng, f"{name}_lm_head", M, 151936, C, False)]
    return cases


def all_cases(rng, args) -> list[Case]:
    # Qwen2.5-0.5B training shapes at 8192 tokens: C = 896, F = 4864, V = 151936.
    M, C, Fw, V = 8192, 896, 4864, 151936
    return [
        gemm_case(rng, "", M, C, C, "bf16"),
        gemm_case(rng, "", M, Fw, C, "bf16"),
        gemm_case(rng, "", M, C, Fw, "bf16"),
        gemm_case(rng, "lm_head", M, V, C, "bf16"),
        gemm_case(rng, "", 4096, 4096, 4096, "f32"),
        rms_norm_case(rng, M, C, "bf16", args.rms_norm),
        rms_norm_case(rng, M, C, "f32", args.rms_norm),
        softmax_case(rng, M, 4096, "bf16"),
        softmax_case(rng, M, 4096, "f32"),
        attention_case(rng, args.attention_batch, 14, 2, 1024, 64, False, args.gqa),
        attention_case(rng, args.attention_batch, 14, 2, 1024, 64, True, args.gqa),
        attention_case(rng, 4, 16, 8, 2048, 128, False, args.gqa),
        attention_case(rng, 4, 16, 8, 2048, 128, True, args.gqa),
        add_case(rng, 8192, 8192, "bf16"),
        add_case(rng, 8192, 8192, "f32"),
        swiglu_case(rng, M, Fw),
    ] + gemv_cases(rng)


def selected(name: str, filt: str) -> bool:
    parts = [p for p in filt.split(",") if p]
    return not parts or any(p in name for p in parts)


def input_sets_for(case: Case) -> int:
    """1 when a repetition moves 2 × L2 or more, else enough sets for 3 × L2 of inputs."""
    if case.bytes >= 2 * L2_BYTES:
        return 1
    wanted = math.ceil(3 * L2_BYTES / max(case.input_bytes, 1.0))
    return min(max(wanted, 2), case.max_input_sets)


def median(values):
    xs = sorted(values)
    n = len(xs)
    if n == 0:
        return None
    return xs[n // 2] if n % 2 else 0.5 * (xs[n // 2 - 1] + xs[n // 2])


def run_case(case: Case, args, entry: dict) -> None:
    torch = _torch()
    sets = input_sets_for(case)
    entry["input_sets"] = sets
    grad_context = torch.enable_grad() if case.needs_grad else torch.no_grad()
    with grad_context:
        call = case.setup(sets)
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        # Warm-up; its last call is timed to estimate one repetition.
        warm_start = torch.cuda.Event(enable_timing=True)
        warm_end = torch.cuda.Event(enable_timing=True)
        for i in range(args.warmup):
            if i == args.warmup - 1:
                warm_start.record()
            call(i % sets)
        warm_end.record()
        warm_end.synchronize()
        repetitions = args.repetitions
        if args.warmup > 0:
            estimate_ms = warm_start.elapsed_time(warm_end)
            budget_ms = args.max_case_seconds * 1000.0
            if estimate_ms * repetitions > budget_ms:
                repetitions = max(5, int(budget_ms / max(estimate_ms, 1e-3)))
            repetitions = min(repetitions, args.repetitions)
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(repetitions)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(repetitions)]
        for i in range(repetitions):
            starts[i].record()
            call(i % sets)
            ends[i].record()
        torch.cuda.synchronize()
    samples = [round(s.elapsed_time(e), 6) for s, e in zip(starts, ends)]
    entry["repetitions"] = repetitions
    entry["samples_ms"] = samples
    entry["peak_allocated_bytes"] = torch.cuda.max_memory_allocated()
    med = median(samples)
    seconds = med * 1e-3
    gbps, tflops = case.bytes / seconds / 1e9, case.flops / seconds / 1e12
    entry["median_ms"] = med
    entry["achieved_gbps"] = gbps
    entry["achieved_tflops"] = tflops
    entry["ceiling_ratio"] = gbps / 1e3 / case.ceiling if case.bound == "memory" else tflops / case.ceiling


def describe_case(case: Case, args) -> dict:
    return {
        "name": case.name, "family": case.family, "dtype": case.dtype, "shape": case.shape,
        "warmup": args.warmup, "repetitions": 0, "repetitions_requested": args.repetitions,
        "input_sets": 0, "samples_ms": [], "bytes": case.bytes, "flops": case.flops,
        "formula": case.formula, "bound": case.bound,
        "ceiling": {"name": case.ceiling_name, "value": case.ceiling,
                    "units": "TB/s" if case.bound == "memory" else "TFLOP/s"},
        "notes": case.notes, "error": None,
    }


def device_info() -> dict:
    torch = _torch()
    prop = torch.cuda.get_device_properties(0)
    info = {"name": prop.name, "compute_capability": f"{prop.major}.{prop.minor}",
            "sm_count": prop.multi_processor_count, "memory_bytes": prop.total_memory}
    l2 = getattr(prop, "L2_cache_size", None)
    if l2 is not None:
        info["l2_bytes"] = l2
    info["cuda_runtime"] = torch.version.cuda
    return info


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--warmup", type=int, default=10, help="untimed calls before timing")
    p.add_argument("--repetitions", type=int, default=100, help="timed calls per case")
    p.add_argument("--filter", default="",
                   help="run cases whose name contains one of these comma-separated substrings")
    p.add_argument("--list", action="store_true", help="print the case names and exit")
    p.add_argument("--attention-batch", type=int, default=8, help="B of the attention cases")
    p.add_argument("--max-case-seconds", type=float, default=30.0,
                   help="cut repetitions so one case's timed part stays under this")
    p.add_argument("--seed", type=int, default=1, help="seed of the random inputs")
    p.add_argument("--rms-norm", choices=("fused", "hf"), default="fused",
                   help="F.rms_norm (fused) or the Hugging Face formula (hf)")
    p.add_argument("--gqa", choices=("enable_gqa", "repeat"), default="enable_gqa",
                   help="SDPA with enable_gqa=True, or repeat_interleave of K/V heads")
    args = p.parse_args(argv)
    if args.warmup < 0 or args.repetitions < 1 or args.attention_batch < 1 or args.max_case_seconds <= 0:
        p.error("--warmup ≥ 0, --repetitions ≥ 1, --attention-batch ≥ 1, --max-case-seconds > 0")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    rng = RandomSource(args.seed)
    cases = [c for c in all_cases(rng, args) if selected(c.name, args.filter)]
    if args.list:
        for c in cases:
            print(c.name)
        return 0

    doc: dict[str, Any] = {
        "schema": "microllm-bench-ops-v1",
        "tool": "torch",
        "argv": list(getattr(sys, "orig_argv", sys.argv)),
        "settings": {"warmup": args.warmup, "repetitions": args.repetitions, "filter": args.filter,
                     "attention_batch": args.attention_batch,
                     "max_case_seconds": args.max_case_seconds, "seed": args.seed,
                     "rms_norm": args.rms_norm, "gqa": args.gqa, "l2_bytes_assumed": L2_BYTES,
                     "rotation": "input sets rotate when bytes < 2·L2: sets = clamp(ceil(3·L2 / "
                                 "input bytes), 2, 8)"},
        "ceilings": {"copy_tbps": COPY_TBPS, "bf16_gemm_tflops": BF16_GEMM_TFLOPS,
                     "f32_gemm_tflops": F32_GEMM_TFLOPS,
                     "source": "SPEC §8 / GPU.md, measured on the H200"},
        "timing": "torch.cuda.Event around each repetition on the current stream after warm-up; "
                  "host launch overhead shows only where it exceeds the GPU time of the previous call",
        "cases": [],
    }
    try:
        torch = _torch()
        doc["versions"] = {"torch": torch.__version__, "cuda": torch.version.cuda,
                           "cudnn": torch.backends.cudnn.version()}
        if not torch.cuda.is_available():
            raise RuntimeError("torch.cuda.is_available() is False")
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        torch.set_float32_matmul_precision("highest")
        doc["device"] = device_info()
    except Exception as e:  # no torch, no GPU: one clear error in the document
        doc["error"] = f"{type(e).__name__}: {e}"
        print(json.dumps(doc, indent=2, ensure_ascii=False))
        print(f"torch_ops: {doc['error']}", file=sys.stderr)
        return 2

    any_error = False
    for case in cases:
        entry = describe_case(case, args)
        print(f"torch_ops: {case.name:<44} ", end="", file=sys.stderr, flush=True)
        try:
            run_case(case, args, entry)
            print(f"median {entry['median_ms']:.4f} ms over {entry['repetitions']}", file=sys.stderr)
        except Exception as e:  # out of memory, unsupported path: report and go on
            any_error = True
            entry.update(error=f"{type(e).__name__}: {e}", samples_ms=[], repetitions=0)
            print(f"error: {entry['error']}", file=sys.stderr)
        doc["cases"].append(entry)
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
    print(json.dumps(doc, indent=2, ensure_ascii=False))
    return 1 if any_error else 0


if __name__ == "__main__":
    sys.exit(main())
