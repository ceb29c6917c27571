"""Support for the PyTorch oracle (test_ops_oracle.py): seeded inputs, the view transforms
the runner applies, the case record, running microllm_op_runner and comparing its files
with PyTorch under the tolerances of SPEC §6 (see test_ops_oracle.py's docstring)."""
import itertools
import os
import subprocess
from dataclasses import dataclass, field
from typing import Callable, Optional

import numpy as np
import pytest
import torch

F32, F64, BF16, F16 = "f32", "f64", "bf16", "f16"
NARROW = (BF16, F16)
TORCH_DTYPE = {F32: torch.float32, F64: torch.float64, BF16: torch.float32, F16: torch.float32}
# The NumPy dtype of a file written for a torch dtype (BF16 travels as float32).
FILE_DTYPE = {torch.float64: np.float64, torch.float32: np.float32, torch.float16: np.float16,
              torch.bfloat16: np.float32, torch.int64: np.int64, torch.int32: np.int32,
              torch.int8: np.int8, torch.uint8: np.uint8, torch.bool: np.bool_}


# ---- inputs ------------------------------------------------------------------------------
_seeds = itertools.count(1)


def randn(shape, dtype=F32, scale=1.0):
    """Normal samples drawn in float64 with a fresh fixed seed, then cast."""
    g = torch.Generator().manual_seed(next(_seeds))
    x = torch.randn(shape, generator=g, dtype=torch.float64) * scale
    if dtype in NARROW:  # exactly representable in the narrow type, held as float32
        return x.to(torch.bfloat16 if dtype == BF16 else torch.float16).to(torch.float32)
    return x.to(TORCH_DTYPE[dtype])


def positive(shape, dtype=F32):
    """Values in [0.5, 3.5): safe for log, sqrt, rsqrt, fractional powers and divisors."""
    g = torch.Generator().manual_seed(next(_seeds))
    return (torch.rand(shape, generator=g, dtype=torch.float64) * 3 + 0.5).to(TORCH_DTYPE[dtype])


def randint(low, high, shape, dtype=torch.int64):
    g = torch.Generator().manual_seed(next(_seeds))
    return torch.randint(low, high, shape, generator=g).to(dtype)


# View transforms the runner applies after loading (tests/oracle/op_runner.cpp).
T2 = {"kind": "transpose_last2"}


def permute(*dims):
    return {"kind": "permute", "dims": list(dims)}


def narrow(dim, start, length):
    return {"kind": "narrow", "dim": dim, "start": start, "length": length}


@dataclass
class Inp:
    name: str
    value: torch.Tensor  # the logical value the operator sees
    grad: bool = True
    view: list = field(default_factory=list)  # the op receives views(stored): non-contiguous


def stored_value(value, views):
    """The tensor to save so that applying `views` to it gives `value` back."""
    t = value
    for v in reversed(views):
        if v["kind"] == "transpose_last2":
            t = t.transpose(-1, -2)
        elif v["kind"] == "permute":
            t = t.permute(*np.argsort(v["dims"]).tolist())
        elif v["kind"] == "narrow":
            # Pad with NaN (0 for integers) so reading outside the view poisons the result.
            fill = float("nan") if t.is_floating_point() else 0
            shape = list(t.shape)
            pre, post = list(shape), list(shape)
            pre[v["dim"]], post[v["dim"]] = v["start"], 3
            t = torch.cat([torch.full(pre, fill, dtype=t.dtype), t,
                           torch.full(post, fill, dtype=t.dtype)], v["dim"])
    return t.contiguous()


# ---- the case record ---------------------------------------------------------------------
@dataclass
class Case:
    id: str
    op: str
    inputs: list
    ref: Callable  # (dict of leaves, args) -> tensor, or dict of named outputs
    args: dict = field(default_factory=dict)
    dtype: str = F32
    accumulates: bool = False  # atol scaled by max(1, max|ref|), see the module docstring
    exact: bool = False  # bitwise equality (casts, views, argmax)
    expect: Optional[Callable] = None  # overrides ref where microllm documents a difference


# ---- running and comparing ---------------------------------------------------------------
def runner_path():
    path = os.environ.get("MICROLLM_OP_RUNNER")
    if not path:
        pytest.fail("MICROLLM_OP_RUNNER is not set: point it at the microllm_op_runner binary")
    if not os.access(path, os.X_OK):
        pytest.fail(f"MICROLLM_OP_RUNNER={path} is not an executable file")
    return path


def run_runner(case_dir):
    return subprocess.run([runner_path(), str(case_dir)], capture_output=True, text=True, timeout=120)


def to_file(t):
    t = t.detach()
    return (t.float() if t.dtype == torch.bfloat16 else t).numpy()


def assert_close(what, got, ref, case):
    ref = ref.detach()
    want = FILE_DTYPE[ref.dtype]
    if case.dtype in NARROW and ref.is_floating_point():  # computed by microllm in BF16/F16
        want = FILE_DTYPE[torch.bfloat16 if case.dtype == BF16 else torch.float16]
    assert got.dtype == want, f"{what}: dtype {got.dtype}, expected {np.dtype(want)}"
    assert got.shape == tuple(ref.shape), f"{what}: shape {got.shape}, PyTorch {tuple(ref.shape)}"
    got = torch.from_numpy(np.array(got)).to(torch.float64)
    ref = ref.to(torch.float64)
    if case.exact or not ref.is_floating_point():
        bad = ~((got == ref) | (got.isnan() & ref.isnan()))
        assert not bad.any(), f"{what}: not bitwise equal at {bad.nonzero()[0].tolist()}: " \
                              f"{got[bad][0].item()} vs PyTorch {ref[bad][0].item()}"
        return
    if case.dtype in NARROW:
        err = ((got - ref).norm() / ref.norm().clamp_min(1e-30)).item()
        assert err <= 1e-2, f"{what}: relative L2 error {err:.3g} > 1e-2"
        return
    atol = rtol = 1e-10 if case.dtype == F64 else 1e-5
    if case.accumulates:
        atol *= max(1.0, ref.abs().max().item()) if ref.numel() else 1.0
    diff = (got - ref).abs()
    bound = atol + rtol * ref.abs()
    bad = ~(diff <= bound)  # NaN counts as a failure
    if bad.any():
        excess = torch.where(bad, (diff - bound).nan_to_num(float("inf")), torch.zeros_like(diff))
        i = np.unravel_index(int(excess.argmax()), tuple(ref.shape)) if ref.dim() else ()
        pytest.fail(f"{what}: {int(bad.sum())} of {ref.numel()} elements beyond "
                    f"{atol:.3g} + {rtol:.3g}·|ref|; max abs diff {diff.nan_to_num(float('inf')).max().item():.3g}; "
                    f"worst at {tuple(int(v) for v in i)}: microllm {got[i].item()!r} vs PyTorch {ref[i].item()!r}")
