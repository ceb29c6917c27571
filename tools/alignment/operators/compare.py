"""Comparison of one microllm output with the PyTorch FP32 reference.

Pass rule, per element: |microllm − pytorch| ≤ atol + rtol·|pytorch| + rounding, with
atol = rtol = 1e-5 (SPEC §6) for every output and gradient. `rounding` is zero except for
the operators whose F32 result is inherently uncertain by more than that (long sums, scores
through a softmax, large rotary angles); tolerances.py derives it per element from the inputs
and docs/alignment.md explains each term.

Metrics: shape and dtype of both sides, max abs difference (with its index, both values and
the bound there), mean abs difference, max relative difference |a−b|/|ref| over ref ≠ 0,
cosine similarity in F64 (1.0 when both sides are all zero, 0.0 when exactly one is), the
worst ratio |a−b| / bound (≤ 1 passes) and the number of elements beyond the bound (NaN and
infinities count unless both sides agree exactly). Given the same reference computed in F64
("truth"), also how far each side is from it: whether a difference is microllm's error or
the FP32 reference's own.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

ATOL = RTOL = 1e-5  # SPEC §6, FP32 operators


@dataclass
class Tolerance:
    atol: float = ATOL
    rtol: float = RTOL
    rounding_rule: str = ""  # how the per-element rounding term is formed; "" when there is none

    def describe(self) -> str:
        text = f"{self.atol:g} + {self.rtol:g}·|ref|"
        return text + (f" + {self.rounding_rule}" if self.rounding_rule else "")


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    """Cosine similarity of two flattened arrays in F64; 1.0 if both are all zero, 0.0 if
    exactly one is; NaN when either holds a NaN or an infinity."""
    a, b = a.astype(np.float64).ravel(), b.astype(np.float64).ravel()
    if not (np.isfinite(a).all() and np.isfinite(b).all()):
        return float("nan")
    na, nb = np.linalg.norm(a), np.linalg.norm(b)
    if na == 0.0 and nb == 0.0:
        return 1.0
    if na == 0.0 or nb == 0.0:
        return 0.0
    return float(np.clip(np.dot(a, b) / (na * nb), -1.0, 1.0))


def _number(x) -> float | None:
    """A JSON-safe float (None for NaN/inf)."""
    x = float(x)
    return x if math.isfinite(x) else None


def compare(name: str, got: np.ndarray, ref: np.ndarray, tol: Tolerance, rounding=None, truth=None) -> dict:
    """One output: metrics and the pass flag. `rounding` (ref's shape or broadcastable) is the
    extra allowance of the rule; `truth` the reference computed in F64, for the diagnostics."""
    row = {"output": name, "shape": list(ref.shape), "microllm_shape": list(got.shape),
           "dtype": str(ref.dtype), "microllm_dtype": str(got.dtype), "tolerance": asdict(tol),
           "rule": tol.describe(), "problems": []}
    if got.shape != ref.shape:
        row["problems"].append(f"shape {tuple(got.shape)} vs PyTorch {tuple(ref.shape)}")
    if got.dtype != ref.dtype:
        row["problems"].append(f"dtype {got.dtype} vs PyTorch {ref.dtype}")
    if row["problems"]:
        row["pass"] = False
        return row
    a, r = got.astype(np.float64), ref.astype(np.float64)
    same = (a == r) | (np.isnan(a) & np.isnan(r))  # equal infinities and NaNs agree
    with np.errstate(invalid="ignore"):
        diff = np.where(same, 0.0, np.abs(a - r))
        diff = np.where(np.isnan(diff), np.inf, diff)
        bound = tol.atol + tol.rtol * np.where(np.isfinite(r), np.abs(r), 0.0)
        if rounding is not None:
            bound = bound + np.asarray(rounding, np.float64)
        ratio = diff / bound
    bad = ~(diff <= bound)
    n = r.size
    row.update(numel=int(n), max_abs=_number(diff.max()) if n else 0.0,
               mean_abs=_number(diff.mean()) if n else 0.0, cosine=_number(cosine(a, r)),
               worst_ratio=_number(ratio.max()) if n else 0.0, beyond=int(bad.sum()))
    nonzero = np.abs(r) > 0
    row["max_rel"] = _number((diff[nonzero] / np.abs(r[nonzero])).max()) if nonzero.any() else 0.0
    if n:
        i = np.unravel_index(int(np.argmax(np.where(np.isfinite(diff), diff, np.inf))), r.shape)
        row["max_abs_at"] = {"index": [int(v) for v in i], "microllm": _number(a[i]), "pytorch": _number(r[i]),
                             "bound": _number(bound[i])}
    if truth is not None and truth.shape == ref.shape:
        t = truth.astype(np.float64)
        with np.errstate(invalid="ignore"):
            row["pytorch_vs_f64"] = _number(np.abs(r - t).max()) if n else 0.0
            row["microllm_vs_f64"] = _number(np.abs(a - t).max()) if n else 0.0
    if row["beyond"]:
        row["problems"].append(f"{row['beyond']} of {n} elements beyond {tol.describe()}")
    row["pass"] = not row["problems"]
    return row
