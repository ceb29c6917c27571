#!/usr/bin/env python3
"""`microllm generate` against the greedy outputs of Hugging Face `generate` stored with a
fixture (expected.json, written by tools/hf/make_generate_fixtures.py on the GPU machine).

Needs only the standard library: it reads the committed expected.json, so it runs on any
machine that has the microllm binary. For each fixture folder it writes a prompts file
(one {"prompt_ids": [...]} per line, all prompts as one batch), runs

    microllm generate --model DIR --prompts FILE --max-new-tokens N --temperature 0
                      --device D --dtype T [--kv-dtype K] --json

and reads one JSON object per prompt ({"index", "prompt_ids", "ids", "text", "finish_reason"}).

  F32   the generated ids must equal `hf_ids` exactly (the EOS that ended a generation
        included), for every prompt. On a difference the first divergent position is shown
        with HF's top-1 − top-2 logit margin there (a near-tie explains a flip).
  BF16  compared with `hf_bf16_ids` (HF's own BF16 greedy path): per prompt the length of
        the equal prefix, that prefix as a fraction of HF's length, and the fraction of
        positions equal overall (reported). The criterion is top-1 agreement along HF's own
        greedy path (teacher-forced: a second batch runs every prefix of HF's path with one
        new token) of at least --bf16-min-teacher-forced (default 0.95). A free-running
        BF16 path diverges at the first BF16 near-tie and then follows another text, so an
        equal prefix is only required with --bf16-prefix N (N > 0).

  python3 tools/hf/compare_generate.py --cli build/cpu-release/apps/microllm/microllm \\
      --device cpu --dtype f32 tests/fixtures/models [--out summary.json]
  python3 tools/hf/compare_generate.py --cli build/cuda-release/apps/microllm/microllm \\
      --device cuda --dtype bf16 tests/fixtures/models/qwen2-trained --out $OUT/bf16.json

Positional arguments are fixture folders (holding expected.json) or folders of them.
Exit status: 0 every fixture passed, 1 a comparison failed, 2 a fixture could not be read
or microllm did not produce its output.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

SCHEMA = "microllm-generate-fixture-v1"
_PROMPT_KEYS = ("prompt_ids", "hf_ids", "hf_bf16_ids")


class SetupError(Exception):
    """A fixture that cannot be read or a microllm run without usable output (exit 2)."""


# ---- fixtures ---------------------------------------------------------------------------


def load_fixture(folder: Path) -> dict[str, Any]:
    """expected.json of a fixture folder, checked for the fields the comparison reads."""
    path = folder / "expected.json"
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as e:
        raise SetupError(f"{path}: cannot read: {e}") from e
    problems = fixture_problems(doc)
    if problems:
        raise SetupError(f"{path}: " + "; ".join(problems))
    return doc


def fixture_problems(doc: Any) -> list[str]:
    """What is wrong with an expected.json document (empty: usable)."""
    if not isinstance(doc, dict):
        return ["expected a JSON object"]
    problems = []
    if doc.get("schema") != SCHEMA:
        problems.append(f"schema is {doc.get('schema')!r}, expected {SCHEMA!r}")
    if not isinstance(doc.get("max_new_tokens"), int) or doc.get("max_new_tokens", 0) < 1:
        problems.append("max_new_tokens must be a positive integer")
    prompts = doc.get("prompts")
    if not isinstance(prompts, list) or not prompts:
        return problems + ["prompts must be a non-empty list"]
    for i, p in enumerate(prompts):
        for key in _PROMPT_KEYS:
            ids = p.get(key) if isinstance(p, dict) else None
            if not isinstance(ids, list) or not all(isinstance(t, int) and t >= 0 for t in ids):
                problems.append(f"prompts[{i}].{key} must be a list of token ids")
        if isinstance(p, dict) and isinstance(p.get("prompt_ids"), list) and not p["prompt_ids"]:
            problems.append(f"prompts[{i}].prompt_ids is empty")
    return problems


def find_fixtures(paths: list[str]) -> list[Path]:
    """Fixture folders named directly, or the sub-folders holding expected.json."""
    found = []
    for name in paths:
        path = Path(name)
        if (path / "expected.json").is_file():
            found.append(path)
        elif path.is_dir():
            found += sorted(p for p in path.iterdir() if (p / "expected.json").is_file())
        else:
            raise SetupError(f"{path}: not a fixture folder (no expected.json) nor a folder of them")
    return found


# ---- running microllm -------------------------------------------------------------------


def run_generate(args, folder: Path, prompts: list[list[int]], max_new_tokens: int,
                 work: Path, tag: str) -> tuple[list[dict], list[str]]:
    """Runs one batch through `microllm generate --json`; the output objects in index order."""
    prompt_file = work / f"{folder.name}-{tag}.jsonl"
    prompt_file.write_text("".join(json.dumps({"prompt_ids": p}) + "\n" for p in prompts),
                           encoding="utf-8")
    argv = [args.cli, "generate", "--model", str(folder), "--prompts", str(prompt_file),
            "--max-new-tokens", str(max_new_tokens), "--temperature", "0",
            "--device", args.device, "--dtype", args.dtype, "--json"]
    if args.kv_dtype:
        argv += ["--kv-dtype", args.kv_dtype]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=args.timeout,
                              check=False)
    except (OSError, subprocess.SubprocessError) as e:
        raise SetupError(f"{' '.join(argv)}: {e}") from e
    if done.returncode != 0:
        raise SetupError(f"{' '.join(argv)} exited {done.returncode}: {done.stderr.strip()[-2000:]}")
    rows = []
    for line in done.stdout.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as e:
                raise SetupError(f"{folder.name}: a line of microllm's output is not JSON ({e}): "
                                 f"{line[:200]}") from e
    if len(rows) != len(prompts):
        raise SetupError(f"{folder.name}: microllm printed {len(rows)} JSON objects for "
                         f"{len(prompts)} prompts")
    for i, (row, prompt) in enumerate(zip(rows, prompts)):
        if row.get("index") != i:
            raise SetupError(f"{folder.name}: output {i} has index {row.get('index')!r}")
        if row.get("prompt_ids") is not None and row["prompt_ids"] != prompt:
            raise SetupError(f"{folder.name}: output {i} echoes other prompt ids than were given")
        if not isinstance(row.get("ids"), list):
            raise SetupError(f"{folder.name}: output {i} has no ids list")
    return rows, argv


# ---- comparison -------------------------------------------------------------------------


def equal_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def compare_prompt(i: int, expected: list[int], got: list[int], margins: list[float] | None,
                   eos: int | None, finish: str | None) -> dict[str, Any]:
    prefix = equal_prefix(expected, got)
    same_pos = sum(x == y for x, y in zip(expected, got))
    row: dict[str, Any] = {
        "index": i, "expected_len": len(expected), "got_len": len(got),
        "equal": expected == got, "prefix": prefix,
        "prefix_fraction": prefix / len(expected) if expected else 1.0,
        "positional_fraction": same_pos / max(len(expected), len(got)) if (expected or got) else 1.0,
        "finish_reason": finish,
    }
    if expected != got:
        row["first_divergence"] = {
            "position": prefix,
            "expected": expected[prefix] if prefix < len(expected) else None,
            "got": got[prefix] if prefix < len(got) else None,
            "hf_margin": margins[prefix] if margins and prefix < len(margins) else None,
        }
    # finish_reason is reported, not judged (its names belong to the CLI): HF's generation
    # ended on EOS ("stop") or at max_new_tokens ("length").
    row["hf_finish"] = "stop" if expected and eos is not None and expected[-1] == eos else "length"
    return row


def compare_fixture(args, folder: Path, work: Path) -> dict[str, Any]:
    doc = load_fixture(folder)
    key = "hf_ids" if args.dtype == "f32" else "hf_bf16_ids"
    prompts = [p["prompt_ids"] for p in doc["prompts"]]
    expected = [p[key] for p in doc["prompts"]]
    max_new = doc["max_new_tokens"]
    eos = doc.get("eos_token_id")
    eos = eos[0] if isinstance(eos, list) and len(eos) == 1 else eos
    rows, argv = run_generate(args, folder, prompts, max_new, work, "free")
    result: dict[str, Any] = {"fixture": folder.name, "family": doc.get("family"), "kind": doc.get("kind"),
                              "dtype": args.dtype, "device": args.device, "expected_key": key,
                              "command": argv, "prompts": []}
    for i, (p, row) in enumerate(zip(doc["prompts"], rows)):
        margins = p.get("hf_margins") if args.dtype == "f32" else p.get("hf_bf16_margins")
        result["prompts"].append(compare_prompt(i, expected[i], row["ids"], margins,
                                                eos if isinstance(eos, int) else None,
                                                row.get("finish_reason")))
    total = sum(len(e) for e in expected)
    result["prefix_fraction"] = sum(r["prefix"] for r in result["prompts"]) / total if total else 1.0
    result["positional_fraction"] = (sum(r["positional_fraction"] * max(r["expected_len"], r["got_len"])
                                         for r in result["prompts"])
                                     / max(1, sum(max(r["expected_len"], r["got_len"]) for r in result["prompts"])))
    if args.dtype == "f32":
        result["criterion"] = "every prompt's ids equal hf_ids"
        result["pass"] = all(r["equal"] for r in result["prompts"])
    elif args.bf16_prefix > 0:
        need = [min(args.bf16_prefix, len(e)) for e in expected]
        result["criterion"] = (f"every prompt's first {args.bf16_prefix} ids (all when HF generated "
                               f"fewer) equal hf_bf16_ids")
        result["pass"] = all(r["prefix"] >= n for r, n in zip(result["prompts"], need))
    else:
        result["criterion"] = "top-1 agreement along HF's BF16 greedy path"
        result["pass"] = True
    if args.teacher_forced:
        result["teacher_forced"] = teacher_forced(args, folder, prompts, expected, work)
        if args.bf16_min_teacher_forced is not None and args.dtype != "f32":
            ok = result["teacher_forced"]["fraction"] >= args.bf16_min_teacher_forced
            result["criterion"] += f"; teacher-forced top-1 ≥ {args.bf16_min_teacher_forced}"
            result["pass"] = result["pass"] and ok
    return result


def teacher_forced(args, folder: Path, prompts: list[list[int]], expected: list[list[int]],
                   work: Path) -> dict[str, Any]:
    """microllm's next token after every prefix of HF's path (one batch, one new token each)."""
    forced, owners = [], []
    for i, (p, e) in enumerate(zip(prompts, expected)):
        for k in range(len(e)):
            forced.append(p + e[:k])
            owners.append((i, k))
    if not forced:
        return {"positions": 0, "agree": 0, "fraction": 1.0, "per_prompt": []}
    rows, _ = run_generate(args, folder, forced, 1, work, "forced")
    agree = [0] * len(prompts)
    for (i, k), row in zip(owners, rows):
        agree[i] += bool(row["ids"]) and row["ids"][0] == expected[i][k]
    n = len(forced)
    return {"positions": n, "agree": sum(agree), "fraction": sum(agree) / n,
            "per_prompt": [{"index": i, "agree": a, "positions": len(e)}
                           for i, (a, e) in enumerate(zip(agree, expected))]}


# ---- report -----------------------------------------------------------------------------


def table(results: list[dict[str, Any]]) -> str:
    head = (f"{'fixture':<16} {'dtype':<5} {'prompts':>7} {'exact':>6} {'min prefix':>10} "
            f"{'prefix frac':>11} {'overall':>8} {'forced':>7}  result")
    lines = [head, "-" * len(head)]
    for r in results:
        if "error" in r:
            lines.append(f"{r['fixture']:<16} {r.get('dtype', ''):<5} {'':>7} {'':>6} {'':>10} {'':>11} "
                         f"{'':>8} {'':>7}  ERROR")
            lines.append(f"    {r['error']}")
            continue
        ps = r["prompts"]
        forced = r.get("teacher_forced")
        lines.append(
            f"{r['fixture']:<16} {r['dtype']:<5} {len(ps):>7} {sum(p['equal'] for p in ps):>6} "
            f"{min(p['prefix'] for p in ps):>10} {r['prefix_fraction']:>11.3f} {r['positional_fraction']:>8.3f} "
            f"{(format(forced['fraction'], '.3f') if forced else '—'):>7}  {'pass' if r['pass'] else 'FAIL'}")
        for p in ps:
            if "first_divergence" in p:
                d = p["first_divergence"]
                margin = "" if d["hf_margin"] is None else f", HF top-1 margin {d['hf_margin']:.3g}"
                lines.append(f"    prompt {p['index']}: first divergence at {d['position']} "
                             f"(HF {d['expected']}, microllm {d['got']}{margin}); lengths "
                             f"{p['expected_len']} / {p['got_len']}")
    lines.append("exact = prompts whose ids equal HF's; prefix = equal leading tokens; overall = equal "
                 "positions / positions; forced = top-1 agreement along HF's path")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("fixtures", nargs="+", help="fixture folders or folders of fixture folders")
    p.add_argument("--cli", required=True, help="path of the microllm binary")
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    p.add_argument("--dtype", default="f32", choices=("f32", "bf16"))
    p.add_argument("--kv-dtype", choices=("f32", "bf16"), help="passed to microllm when given")
    p.add_argument("--bf16-prefix", type=int, default=0,
                   help="BF16: leading tokens that must also equal HF's for every prompt (0: report only)")
    p.add_argument("--teacher-forced", dest="teacher_forced", action="store_true", default=None,
                   help="also run every prefix of HF's path (default: on for bf16, off for f32)")
    p.add_argument("--no-teacher-forced", dest="teacher_forced", action="store_false")
    p.add_argument("--bf16-min-teacher-forced", type=float, default=0.95,
                   help="BF16: fail below this top-1 agreement along HF's path (default 0.95)")
    p.add_argument("--timeout", type=float, default=600, help="seconds per microllm run")
    p.add_argument("--out", help="write the JSON summary here")
    args = p.parse_args(argv)
    if args.teacher_forced is None:
        args.teacher_forced = args.dtype == "bf16"

    try:
        folders = find_fixtures(args.fixtures)
    except SetupError as e:
        print(f"compare_generate: {e}", file=sys.stderr)
        return 2
    if not folders:
        print(f"compare_generate: no fixture folders under {' '.join(args.fixtures)}", file=sys.stderr)
        return 2
    results, setup_failed = [], False
    with tempfile.TemporaryDirectory(prefix="compare_generate_") as tmp:
        for folder in folders:
            try:
                results.append(compare_fixture(args, folder, Path(tmp)))
            except SetupError as e:
                setup_failed = True
                results.append({"fixture": folder.name, "dtype": args.dtype, "error": str(e), "pass": False})
    summary = {"cli": args.cli, "device": args.device, "dtype": args.dtype, "kv_dtype": args.kv_dtype,
               "bf16_prefix": args.bf16_prefix, "pass": all(r["pass"] for r in results),
               "fixtures": results}
    if args.out:
        Path(args.out).write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    print(table(results))
    if setup_failed:
        return 2
    return 0 if summary["pass"] else 1


if __name__ == "__main__":
    sys.exit(main())
