#!/usr/bin/env python3
"""Benchmark records in the SPEC §4.12 format (schema ``microllm-record-v1``).

One JSON object per file, ``bench/records/<kind>/<UTC time>-<short name>.json``, created
exclusively (``open(path, "x")``): an existing record is never overwritten. Fields:

  schema        "microllm-record-v1"
  kind          what was measured ("ops", "decode", "train", ...); also the folder
  created_utc   ISO 8601 UTC time of writing, e.g. "2026-10-28T12:34:56Z"
  git           {commit, dirty}: from ``git`` where the tree has .git, else from the
                environment (MICROLLM_GIT_COMMIT, MICROLLM_GIT_DIRTY), else
                {"unknown", true}: a record of unknown provenance counts as dirty
  command       exact argv of the process that made the record
  host          {cpu, gpu, driver, cuda, clocks} (clocks from nvidia-smi where readable)
  versions      {microllm (CMakeLists project VERSION), torch, ... where used}
  config        what was run: model/case, shapes, dtype, batch, warm-up, repetitions, ...
  samples       {units, values}: the raw per-repetition values
  summary       statistics derived from samples.values (see ``summarize``)
  peer          (comparisons) {name, samples, summary}
  ratio_of_medians  (comparisons) {definition, value[, higher_is_better]}: for time-like
                units peer median / microllm median; for rates (higher_is_better true, e.g.
                tokens/s) microllm median / peer median. Either way > 1 means microllm is faster

Statistics (``summarize``) use only the standard library: min, max, mean (math.fsum),
median, p95, q1, q3 by linear interpolation between closest ranks (Hyndman & Fan type 7,
NumPy's default "linear": for sorted x of n values, h = (n − 1)·p, value =
x[⌊h⌋] + (h − ⌊h⌋)·(x[⌊h⌋+1] − x[⌊h⌋])), IQR = q3 − q1, stdev with the n − 1 denominator
(0 for one sample), CV = stdev / mean.

CLI:
  record.py summarize 1.0 2.0 3.0                      statistics as JSON
  record.py write --kind ops --name gemm --units ms --samples 1.2,1.3 [--peer-samples ...]
                  [--peer-name torch] [--config '{"dtype": "bf16"}'] [--records-dir DIR]
                  [--higher-is-better]                 (rate units: ratio = microllm / peer)
  record.py validate FILE...                           schema and summary checks
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import math
import os
import platform
import re
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterable, Sequence

SCHEMA = "microllm-record-v1"
REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_RECORDS_DIR = REPO_ROOT / "bench" / "records"
_SHORT_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_REQUIRED = ("schema", "kind", "created_utc", "git", "command", "host", "versions", "config",
             "samples", "summary")

# ---- statistics -------------------------------------------------------------------------


def percentile(sorted_values: Sequence[float], p: float) -> float:
    """The p-quantile (0 ≤ p ≤ 1) of already sorted values, linear interpolation (type 7)."""
    if not sorted_values:
        raise ValueError("percentile of no values")
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"percentile p must lie in [0, 1], got {p}")
    h = (len(sorted_values) - 1) * p
    lo = math.floor(h)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (h - lo) * (sorted_values[hi] - sorted_values[lo])


def summarize(values: Iterable[float]) -> dict[str, Any]:
    """min, median, mean, p95, max, q1, q3, IQR, stdev (n − 1) and CV of the samples."""
    xs = sorted(float(v) for v in values)
    if not xs:
        raise ValueError("summary of no samples")
    if any(not math.isfinite(v) for v in xs):
        raise ValueError("samples must be finite numbers")
    n = len(xs)
    mean = math.fsum(xs) / n
    stdev = math.sqrt(math.fsum((v - mean) ** 2 for v in xs) / (n - 1)) if n > 1 else 0.0
    q1, q3 = percentile(xs, 0.25), percentile(xs, 0.75)
    return {
        "count": n,
        "min": xs[0],
        "median": percentile(xs, 0.5),
        "mean": mean,
        "p95": percentile(xs, 0.95),
        "max": xs[-1],
        "q1": q1,
        "q3": q3,
        "iqr": q3 - q1,
        "stdev": stdev,
        "cv": stdev / mean if mean != 0 else None,
        "method": "percentiles: linear interpolation between closest ranks (Hyndman-Fan type 7, "
                  "numpy 'linear'); stdev with n-1; cv = stdev / mean",
    }


def ratio_of_medians(microllm: dict[str, Any] | None, peer: dict[str, Any] | None,
                     higher_is_better: bool = False) -> float | None:
    """> 1 means microllm is faster: peer median / microllm median for time-like units,
    microllm median / peer median for rates (higher_is_better). None when either is missing."""
    if not microllm or not peer:
        return None
    num, den = (microllm, peer) if higher_is_better else (peer, microllm)
    if not den.get("median"):
        return None
    return num["median"] / den["median"]


def ratio_definition(higher_is_better: bool) -> str:
    if higher_is_better:
        return "microllm median / peer median (> 1: microllm faster; units are a rate)"
    return "peer median / microllm median (> 1: microllm faster)"


# ---- provenance -------------------------------------------------------------------------


def _run(argv: Sequence[str], cwd: Path | None = None, timeout: float = 30) -> str | None:
    try:
        done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=timeout,
                              check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


def _env_flag(text: str) -> bool:
    return text.strip().lower() not in ("0", "false", "no", "off", "")


def git_state(repo_root: Path = REPO_ROOT, env: dict[str, str] | None = None) -> dict[str, Any]:
    """{commit, dirty}. Stated provenance (MICROLLM_GIT_COMMIT, MICROLLM_GIT_DIRTY) wins: a
    tree copied to another machine (the GPU machine) may carry a stale .git, and the caller
    knows which commit it built. Otherwise from ``git``, where untracked files count (a new
    .cu file changes the build) and records under bench/records do not, so writing records
    does not dirty the next run. Neither: {"unknown", dirty}."""
    env = os.environ if env is None else env
    if env.get("MICROLLM_GIT_COMMIT"):
        dirty = _env_flag(env.get("MICROLLM_GIT_DIRTY", "1"))
        return {"commit": env["MICROLLM_GIT_COMMIT"].strip(), "dirty": dirty}
    if (repo_root / ".git").exists():
        commit = _run(["git", "-C", str(repo_root), "rev-parse", "HEAD"])
        status = _run(["git", "-C", str(repo_root), "status", "--porcelain", "--", ".",
                       ":(exclude)bench/records"])
        if commit is not None and status is not None:
            return {"commit": commit.strip(), "dirty": bool(status.strip())}
    return {"commit": "unknown", "dirty": True}


def microllm_version(repo_root: Path = REPO_ROOT) -> str | None:
    """The VERSION of project(microllm ...) in the top-level CMakeLists.txt."""
    try:
        text = (repo_root / "CMakeLists.txt").read_text(encoding="utf-8")
    except OSError:
        return None
    match = re.search(r"project\s*\(\s*microllm\b[^)]*?\bVERSION\s+([0-9][0-9.]*)", text)
    return match.group(1) if match else None


_SMI_FIELDS = {
    "name": "name",
    "driver": "driver_version",
    "pstate": "pstate",
    "sm_mhz": "clocks.sm",
    "mem_mhz": "clocks.mem",
    "max_sm_mhz": "clocks.max.sm",
    "max_mem_mhz": "clocks.max.mem",
    "app_sm_mhz": "clocks.applications.graphics",
    "power_limit_w": "power.limit",
    "temperature_c": "temperature.gpu",
}


def _nvidia_smi(fields: Sequence[str]) -> list[str] | None:
    out = _run(["nvidia-smi", "--id=0", f"--query-gpu={','.join(fields)}",
                "--format=csv,noheader,nounits"])
    if out is None or not out.strip():
        return None
    values = [v.strip() for v in out.strip().splitlines()[0].split(",")]
    return values if len(values) == len(fields) else None


def gpu_query() -> dict[str, str]:
    """GPU 0's fields from nvidia-smi; fields it cannot read are left out."""
    keys, fields = list(_SMI_FIELDS), list(_SMI_FIELDS.values())
    values = _nvidia_smi(fields)
    result: dict[str, str] = {}
    if values is not None:
        pairs = zip(keys, values)
    else:  # one unknown field fails the whole query: ask one by one
        pairs = []
        for key, field in zip(keys, fields):
            one = _nvidia_smi([field])
            if one is not None:
                pairs.append((key, one[0]))
    for key, value in pairs:
        if value and value not in ("[N/A]", "N/A", "[Not Supported]"):
            result[key] = value
    return result


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def host_info(cuda: str | None = None) -> dict[str, Any]:
    """{cpu, gpu, driver, cuda, clocks} of this machine; clocks read now via nvidia-smi."""
    gpu = gpu_query()
    clocks = {k: gpu[k] for k in ("pstate", "sm_mhz", "mem_mhz", "max_sm_mhz", "max_mem_mhz",
                                  "app_sm_mhz", "power_limit_w", "temperature_c") if k in gpu}
    if cuda is None:
        header = _run(["nvidia-smi"]) or ""
        match = re.search(r"CUDA Version:\s*([0-9.]+)", header)
        cuda = match.group(1) if match else None
    return {
        "cpu": cpu_name(),
        "cpu_count": os.cpu_count(),
        "gpu": gpu.get("name"),
        "driver": gpu.get("driver"),
        "cuda": cuda,
        "clocks": clocks or None,
    }


def utc_now() -> _dt.datetime:
    return _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0)


# ---- records ----------------------------------------------------------------------------


def make_record(kind: str, config: dict[str, Any], samples: Sequence[float], units: str, *,
                peer: dict[str, Any] | None = None, command: Sequence[str] | None = None,
                host: dict[str, Any] | None = None, versions: dict[str, Any] | None = None,
                git: dict[str, Any] | None = None, created: _dt.datetime | None = None,
                extra: dict[str, Any] | None = None,
                higher_is_better: bool = False) -> dict[str, Any]:
    """A record dict. `peer` is {name, samples: [...]} (units as ours) for comparisons.
    Empty samples (a failed run) give summary None; `extra` adds top-level fields
    (e.g. derived rates, errors). `higher_is_better` marks rate units (tokens/s): the
    ratio is then microllm / peer, so > 1 still means microllm is faster."""
    created = created or utc_now()
    values = [float(v) for v in samples]
    record: dict[str, Any] = {
        "schema": SCHEMA,
        "kind": kind,
        "created_utc": created.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "git": git if git is not None else git_state(),
        "command": list(command) if command is not None else list(getattr(sys, "orig_argv", sys.argv)),
        "host": host if host is not None else host_info(),
        "versions": {"microllm": microllm_version(), **(versions or {})},
        "config": config,
        "samples": {"units": units, "values": values},
        "summary": summarize(values) if values else None,
    }
    if peer is not None:
        peer_values = [float(v) for v in peer.get("samples", [])]
        peer_summary = summarize(peer_values) if peer_values else None
        record["peer"] = {
            "name": peer.get("name", "peer"),
            "samples": {"units": units, "values": peer_values},
            "summary": peer_summary,
        }
        record["ratio_of_medians"] = {
            "definition": ratio_definition(higher_is_better),
            "value": ratio_of_medians(record["summary"], peer_summary, higher_is_better),
        }
        if higher_is_better:
            record["ratio_of_medians"]["higher_is_better"] = True
    if extra:
        record.update(extra)
    return record


def record_path(records_dir: Path, kind: str, short_name: str, created_utc: str) -> Path:
    """<records_dir>/<kind>/<YYYYmmddTHHMMSSZ>-<short name>.json"""
    for label, value in (("kind", kind), ("short name", short_name)):
        if not _SHORT_NAME.match(value):
            raise ValueError(f"record {label} {value!r} must be letters, digits, '.', '_', '-'")
    stamp = created_utc.replace("-", "").replace(":", "")
    return Path(records_dir) / kind / f"{stamp}-{short_name}.json"


def write_record(record: dict[str, Any], short_name: str,
                 records_dir: Path | str = DEFAULT_RECORDS_DIR) -> Path:
    """Creates the record's file exclusively; FileExistsError if it exists (never overwrites)."""
    path = record_path(Path(records_dir), record["kind"], short_name, record["created_utc"])
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(record, indent=2, ensure_ascii=False, allow_nan=False) + "\n"
    with open(path, "x", encoding="utf-8") as f:
        f.write(text)
    return path


def validate(record: dict[str, Any]) -> list[str]:
    """Problems with a record: missing fields, wrong schema, summaries that differ from
    the statistics of its samples. Empty list: valid."""
    problems = [f"missing field {k!r}" for k in _REQUIRED if k not in record]
    if problems:
        return problems
    if record["schema"] != SCHEMA:
        problems.append(f"schema is {record['schema']!r}, expected {SCHEMA!r}")
    if not {"commit", "dirty"} <= set(record["git"]):
        problems.append("git needs commit and dirty")

    def check(where: str, samples: dict[str, Any], summary: dict[str, Any] | None) -> None:
        values = samples.get("values", [])
        if "units" not in samples:
            problems.append(f"{where}.samples has no units")
        expected = summarize(values) if values else None
        if (expected is None) != (summary is None):
            problems.append(f"{where}.summary does not match its samples")
            return
        for key, value in (expected or {}).items():
            got = summary.get(key)
            if isinstance(value, float) and isinstance(got, (int, float)):
                if not math.isclose(value, got, rel_tol=1e-12, abs_tol=1e-15):
                    problems.append(f"{where}.summary.{key} is {got}, samples give {value}")
            elif value != got:
                problems.append(f"{where}.summary.{key} is {got!r}, samples give {value!r}")

    check("record", record["samples"], record["summary"])
    if "peer" in record:
        check("peer", record["peer"]["samples"], record["peer"]["summary"])
        ratio = record.get("ratio_of_medians", {})
        expected = ratio_of_medians(record["summary"], record["peer"]["summary"],
                                    bool(ratio.get("higher_is_better", False)))
        got = ratio.get("value")
        if (expected is None) != (got is None) or (
                expected is not None and not math.isclose(expected, got, rel_tol=1e-12)):
            problems.append(f"ratio_of_medians is {got}, medians give {expected}")
    return problems


# ---- CLI --------------------------------------------------------------------------------


def _floats(text: str) -> list[float]:
    return [float(v) for v in text.replace(",", " ").split()]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p_sum = sub.add_parser("summarize", help="print the statistics of samples as JSON")
    p_sum.add_argument("values", nargs="+", type=float)
    p_write = sub.add_parser("write", help="write one record (exclusive create)")
    p_write.add_argument("--kind", required=True)
    p_write.add_argument("--name", required=True, help="short name, part of the file name")
    p_write.add_argument("--units", required=True)
    p_write.add_argument("--samples", required=True, help="comma- or space-separated values")
    p_write.add_argument("--peer-samples", help="comma- or space-separated values")
    p_write.add_argument("--peer-name", default="torch")
    p_write.add_argument("--config", default="{}", help="JSON object")
    p_write.add_argument("--versions", default="{}", help="JSON object, e.g. {\"torch\": \"2.11\"}")
    p_write.add_argument("--records-dir", default=str(DEFAULT_RECORDS_DIR))
    p_write.add_argument("--higher-is-better", action="store_true",
                         help="the units are a rate (tokens/s): ratio = microllm / peer")
    p_val = sub.add_parser("validate", help="check record files; exit 1 on a problem")
    p_val.add_argument("files", nargs="+")
    args = parser.parse_args(argv)

    if args.command == "summarize":
        print(json.dumps(summarize(args.values), indent=2))
        return 0
    if args.command == "write":
        peer = None
        if args.peer_samples is not None:
            peer = {"name": args.peer_name, "samples": _floats(args.peer_samples)}
        record = make_record(args.kind, json.loads(args.config), _floats(args.samples),
                             args.units, peer=peer, versions=json.loads(args.versions),
                             higher_is_better=args.higher_is_better)
        print(write_record(record, args.name, args.records_dir))
        return 0
    bad = 0
    for name in args.files:
        problems = validate(json.loads(Path(name).read_text(encoding="utf-8")))
        for problem in problems:
            print(f"{name}: {problem}")
        bad += bool(problems)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
