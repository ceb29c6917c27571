#!/usr/bin/env python3
"""The PyTorch side of the model alignment: the same four passes as `microllm_alignment model`.

Rebuilds the architecture from the parameters microllm wrote (a Hugging Face folder:
config.json + model.safetensors, read here without the safetensors package so Debian's
torch 1.13 works) with tools/alignment/torch_reference.py, and writes records in the same
JSON-lines format (docs/alignment.md):

  values          PREFIX_values.jsonl           ids, every named intermediate, logits
  operator-timing PREFIX_operator_timing.jsonl  per named value: time since the previous one
  layer-timing    PREFIX_layer_timing.jsonl     embedding, each block, final norm, LM head, forward
  training        PREFIX_training_values.jsonl  next-token loss and every parameter gradient
                  PREFIX_backward_timing.jsonl  backward alone (forward outside the timer)

CUDA timings synchronize at every boundary (torch.cuda.synchronize), like microllm's.
TF32 is off, so F32 GEMMs are true F32 on both sides.

  pytorch_runner.py --parameters DIR --ids IDS.npy --output OUT --pass values \
      [--device cpu|cuda] [--dtype f32|bf16] [--warmup 5] [--repetitions 20] [--max-captured-elements N]
"""

from __future__ import annotations

import argparse
import json
import struct
import sys
import time
from collections import OrderedDict
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import torch_reference  # noqa: E402

DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16, "f64": torch.float64}
SAFETENSORS_DTYPES = {"F32": (np.float32, None), "F64": (np.float64, None), "F16": (np.float16, None),
                      "BF16": (np.int16, torch.bfloat16), "I64": (np.int64, None), "I32": (np.int32, None)}


def read_safetensors(path: Path) -> dict:
    """name → CPU tensor, from one safetensors file (8-byte header length, JSON header, data)."""
    blob = path.read_bytes()
    (header_len,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + header_len])
    base = 8 + header_len
    out = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        np_dtype, torch_view = SAFETENSORS_DTYPES[entry["dtype"]]
        start, end = entry["data_offsets"]
        array = np.frombuffer(blob, dtype=np_dtype, count=(end - start) // np.dtype(np_dtype).itemsize,
                              offset=base + start).reshape(entry["shape"]).copy()
        tensor = torch.from_numpy(array)
        out[name] = tensor.view(torch_view) if torch_view is not None else tensor
    return out


def dtype_name(dtype: torch.dtype) -> str:
    return {torch.float32: "f32", torch.bfloat16: "bf16", torch.float64: "f64", torch.int64: "i64"}[dtype]


def category_of(name: str) -> str:
    if name == "ids":
        return "input"
    if name == "logits":
        return "output"
    if name in ("embedding", "final_norm") or name.endswith(".output"):
        return "layer"
    return "operator"


class Records:
    """JSON lines with an occurrence counter per (kind, name)."""

    def __init__(self, path: Path):
        self.file = path.open("w")
        self.seen: dict = {}

    def occurrence(self, kind: str, name: str) -> int:
        key = (kind, name)
        self.seen[key] = self.seen.get(key, 0) + 1
        return self.seen[key] - 1

    def value(self, kind: str, name: str, value: torch.Tensor, limit: int) -> None:
        flat = value.detach().reshape(-1)
        captured = min(flat.numel(), limit)
        head = flat[:captured].cpu()
        values = head.to(torch.float64).tolist() if head.is_floating_point() else head.tolist()
        self.write({"kind": kind, "category": category_of(name), "name": name,
                    "occurrence": self.occurrence(kind, name), "dtype": dtype_name(value.dtype),
                    "shape": list(value.shape), "numel": flat.numel(), "captured": captured,
                    "truncated": captured < flat.numel(), "values": values})

    def timing(self, kind: str, name: str, samples: list) -> None:
        self.write({"kind": kind, "name": name, "occurrence": self.occurrence(kind, name), "units": "ms",
                    "samples": samples})

    def write(self, record: dict) -> None:
        self.file.write(json.dumps(record) + "\n")

    def close(self) -> None:
        self.file.close()


class Runner:
    def __init__(self, args):
        self.args = args
        self.device = torch.device(args.device)
        self.dtype = DTYPES[args.dtype]
        folder = Path(args.parameters)
        self.cfg = json.loads((folder / "config.json").read_text())
        self.params = {k: v.to(self.device, self.dtype) for k, v in read_safetensors(folder / "model.safetensors").items()}
        self.ids = torch.from_numpy(np.load(args.ids).astype(np.int64)).to(self.device)  # (B, T)
        self.out = Path(args.output)

    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def forward(self, observe=None) -> torch.Tensor:
        return torch_reference.forward(self.cfg, self.params, self.ids, self.dtype, observe)

    def records(self, stem: str) -> Records:
        return Records(self.out / f"{self.args.prefix}_{stem}.jsonl")

    def time_boundaries(self, body) -> "OrderedDict[str, list]":
        """Warm-up + repetitions of body(record); record(name) closes the range since the last."""
        rows: "OrderedDict[str, list]" = OrderedDict()
        for rep in range(self.args.warmup + self.args.repetitions):
            keep = rep >= self.args.warmup
            self.sync()
            last = [time.perf_counter()]

            def record(name):
                self.sync()
                now = time.perf_counter()
                if keep:
                    rows.setdefault(name, []).append((now - last[0]) * 1e3)
                last[0] = time.perf_counter()

            body(record)
        return rows

    def write_timings(self, kind: str, stem: str, rows) -> None:
        out = self.records(stem)
        for name, samples in rows.items():
            out.timing(kind, name, samples)
        out.close()

    def values(self) -> None:
        out = self.records("values")
        with torch.no_grad():
            out.value("value", "ids", self.ids, self.args.max_captured_elements)
            self.forward(lambda name, v: out.value("value", name, v, self.args.max_captured_elements))
        out.close()

    def operator_timing(self) -> None:
        with torch.no_grad():
            rows = self.time_boundaries(lambda record: self.forward(lambda name, v: record(name)))
        self.write_timings("operator_timing", "operator_timing", rows)

    def layer_timing(self) -> None:
        def layers(record):
            def observe(name, v):
                if name in ("embedding", "final_norm"):
                    record(name)
                elif name == "logits":
                    record("lm_head")
                elif name.endswith(".output"):
                    record(name[: -len(".output")])
            self.forward(observe)

        def whole(record):
            self.forward()
            record("forward")

        with torch.no_grad():
            rows = self.time_boundaries(layers)
            rows.update(self.time_boundaries(whole))
        self.write_timings("layer_timing", "layer_timing", rows)

    def training(self) -> None:
        for p in self.params.values():
            p.requires_grad_(True)
        out = self.records("training_values")
        loss = torch_reference.next_token_loss(self.forward(), self.ids)
        out.value("loss", "loss", loss, self.args.max_captured_elements)
        loss.backward()
        for name in sorted(self.params):
            grad = self.params[name].grad
            if grad is not None:
                out.value("gradient", name, grad, self.args.max_captured_elements)
        out.close()
        samples = []
        for rep in range(self.args.warmup + self.args.repetitions):
            for p in self.params.values():
                p.grad = None
            loss = torch_reference.next_token_loss(self.forward(), self.ids)
            self.sync()
            start = time.perf_counter()
            loss.backward()
            self.sync()
            if rep >= self.args.warmup:
                samples.append((time.perf_counter() - start) * 1e3)
        self.write_timings("backward_timing", "backward_timing", {"backward": samples})


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--parameters", required=True, help="Hugging Face folder written by microllm")
    p.add_argument("--ids", required=True)
    p.add_argument("--output", required=True)
    p.add_argument("--prefix", default="pytorch")
    p.add_argument("--pass", dest="pass_name", required=True,
                   choices=["values", "operator-timing", "layer-timing", "training"])
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default="f32", choices=sorted(DTYPES))
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--repetitions", type=int, default=20)
    p.add_argument("--max-captured-elements", type=int, default=1 << 20)
    args = p.parse_args()
    torch.manual_seed(0)
    if hasattr(torch.backends, "cuda"):
        torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    start = time.perf_counter()
    runner = Runner(args)
    getattr(runner, args.pass_name.replace("-", "_"))()
    print(json.dumps({"pass": args.pass_name, "device": args.device, "dtype": args.dtype, "torch": torch.__version__,
                      "parameters": len(runner.params), "ids_shape": list(runner.ids.shape),
                      "seconds": round(time.perf_counter() - start, 3)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
