"""Support for the PyTorch oracle of every operator (tests/ops/<op>/test_<op>_oracle.py and
the runner checks in tests/oracle/test_op_runner.py): seeded inputs, the view transforms the
runner applies, the case record and list, running microllm_op_runner on a case and
comparing its files with PyTorch.

Each case writes its inputs as .npy files and a case.json into a temporary directory, runs
microllm_op_runner (path in $MICROLLM_OP_RUNNER, see tests/oracle/op_runner.cpp for the
protocol), then compares out.npy and every grad_<input>.npy with PyTorch on the same
inputs and the same random grad_output.

Inputs are drawn in float64 with fixed seeds and cast to the case dtype; each oracle file
restarts the seed sequence (restart_seeds), so its inputs do not depend on which other
files pytest collects. Tolerances follow SPEC §6: F32 |got - ref| <= 1e-5 + 1e-5·|ref| per
element; F64 1e-10 + 1e-10·|ref| (F64 catches algorithmic errors that F32 rounding would
hide); BF16/F16 relative L2 error <= 1e-2. Only the realistic-width cases (2048-term dot
products, 32000-wide rows) scale atol by max(1, max|ref|) (`accumulates=True`): there
PyTorch's own F32 sum can be off by more than 1e-5 (measured: the log_softmax backward over
32000 classes reached 1.2x the plain bound for one seed, with PyTorch 1.35e-5 and microllm
9e-7 away from an F64 truth). All other cases pass the plain bound with a margin of 3x or
more (measured).

Run: MICROLLM_OP_RUNNER=build/cpu-release/tests/microllm_op_runner \
     /usr/bin/python3 -m pytest -q tests/ops/*/test_*_oracle.py tests/oracle/test_op_runner.py
(tests/ops/conftest.py puts tests/oracle on sys.path so the op files import this module.)
torch is imported unconditionally: without it the suite fails at collection, never skips.
"""
import importlib.util
import itertools
import json
import os
import subprocess
import sys
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

import numpy as np
import pytest
import torch

torch.set_num_threads(1)

F32, F64, BF16, F16 = "f32", "f64", "bf16", "f16"
NARROW = (BF16, F16)
TORCH_DTYPE = {F32: torch.float32, F64: torch.float64, BF16: torch.float32, F16: torch.float32}
# The NumPy dtype of a file written for a torch dtype (BF16 travels as float32).
FILE_DTYPE = {torch.float64: np.float64, torch.float32: np.float32, torch.float16: np.float16,
              torch.bfloat16: np.float32, torch.int64: np.int64, torch.int32: np.int32,
              torch.int8: np.int8, torch.uint8: np.uint8, torch.bool: np.bool_}


# ---- inputs ------------------------------------------------------------------------------
_seeds = itertools.count(1)


def restart_seeds():
    """Starts the seed sequence of randn, positive and randint again at 1 (once per file)."""
    global _seeds
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


class Cases(list):
    """The cases of one oracle file; add() names each "<op>-<id>-<dtype>"."""

    def add(self, id, op, inputs, ref, dtype=F32, **kw):
        self.append(Case(f"{op}-{id}-{dtype}", op, inputs, ref, dtype=dtype, **kw))


def for_dtypes(fn, dtypes=(F32, F64)):
    for dt in dtypes:
        fn(dt)


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


# ---- one case end to end -----------------------------------------------------------------
def run_case(case, tmp_path):
    """Runs `case` in microllm_op_runner and compares its forward and gradients with PyTorch."""
    # Write the inputs as the runner will load them, and the case description.
    for inp in case.inputs:
        np.save(tmp_path / f"{inp.name}.npy", to_file(stored_value(inp.value, inp.view)))
    spec = {"op": case.op, "dtype": case.dtype, "args": case.args,
            "inputs": [{"name": i.name, "requires_grad": i.grad, "view": i.view} for i in case.inputs]}

    # PyTorch forward on leaves holding the logical values.
    leaves = {i.name: i.value.clone().requires_grad_(i.grad) for i in case.inputs}
    out = (case.expect or case.ref)(leaves, case.args)
    outs = out if isinstance(out, dict) else {"out": out}
    wants_grad = [n for n, i in zip(leaves, case.inputs) if i.grad]
    grad_outputs = {}
    if wants_grad:
        gen = torch.Generator().manual_seed(zlib.crc32(case.id.encode()))  # per case: order-free
        for name, o in outs.items():
            g = torch.randn(tuple(o.shape), generator=gen, dtype=torch.float64).to(o.dtype)
            if case.dtype in NARROW:  # the runner casts grads to the narrow type
                g = g.to(torch.bfloat16 if case.dtype == BF16 else torch.float16).to(o.dtype)
            grad_outputs[name] = g
            np.save(tmp_path / ("grad_output.npy" if name == "out" else f"grad_output_{name}.npy"), to_file(g))
    (tmp_path / "case.json").write_text(json.dumps(spec))

    result = run_runner(tmp_path)
    assert result.returncode == 0, f"runner failed ({result.returncode}): {result.stderr.strip()}"

    for name, o in outs.items():
        assert_close(f"{case.id} forward '{name}'", np.load(tmp_path / f"{name}.npy"), o, case)
    if not wants_grad:
        return
    grads = torch.autograd.grad([outs[n] for n in grad_outputs], [leaves[n] for n in wants_grad],
                                [grad_outputs[n] for n in grad_outputs], allow_unused=True)
    for name, g in zip(wants_grad, grads):
        g = torch.zeros_like(leaves[name]) if g is None else g
        assert_close(f"{case.id} grad '{name}'", np.load(tmp_path / f"grad_{name}.npy"), g, case)


# ---- every oracle file -------------------------------------------------------------------
OPS_DIR = Path(__file__).resolve().parent.parent / "ops"


# Inference-only operators with their own runner and oracle (tests/ops/sampling, penalties).
OWN_RUNNER = {"sampling", "penalties"}


def oracle_files():
    """tests/ops/<op>/test_<op>_oracle.py of the operators microllm_op_runner runs, sorted."""
    return sorted(p for p in OPS_DIR.glob("*/test_*_oracle.py") if p.parent.name not in OWN_RUNNER)


def all_cases():
    """The cases of every oracle file, importing those pytest has not imported (by their
    file name, as pytest's default import mode names them)."""
    cases = []
    for path in oracle_files():
        module = sys.modules.get(path.stem)
        if module is None:
            spec = importlib.util.spec_from_file_location(path.stem, path)
            module = importlib.util.module_from_spec(spec)
            sys.modules[path.stem] = module
            spec.loader.exec_module(module)
        assert Path(module.__file__).resolve() == path, f"{path.stem} is {module.__file__}, not {path}"
        cases += module.CASES
    return cases
