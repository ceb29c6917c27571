#!/usr/bin/env python3
"""Tokenizer encode throughput, microllm against Hugging Face `tokenizers`, one thread each, on
the same strings: one SPEC §4.12 record (kind "tokenizer") per tokenizer, then a table.

  python3 bench/tokenizer/run_tokenizer_bench.py build/cpu-release/bench/microllm_bench_tokenizer \\
      [--tokenizer qwen3=DIR --tokenizer llama3=DIR --tokenizer deepseek_v3=DIR] \\
      [--text FILE] [--text-bytes 4000000] [--chunk-bytes 4096] [--warmup 2] [--repetitions 10] \\
      [--python python3] [--no-peer] [--records-dir bench/records] [--raw-dir DIR] [--save-text FILE]

Text: --text FILE (UTF-8), or by default the "real English" of the tokenizer parity corpus
(tests/tokenizer/make_corpus.py: Debian's license texts and CMake's documentation under
/usr/share), up to --text-bytes. Where those files are missing (the GPU machine), make the
text elsewhere with --save-text FILE (writes it and exits) and pass it with --text.
The text is cut at blank lines into strings of at most --chunk-bytes (a paragraph longer
than that is one string) and written as JSONL; both sides encode exactly those strings, one
call per string with add_special_tokens=False: microllm_bench_tokenizer (bench_tokenizer.cpp)
and hf_tokenizer_bench.py (Tokenizer.from_file(...).encode, RAYON_NUM_THREADS=1,
TOKENIZERS_PARALLELISM=false). They run one after the other, never at once.

Tokenizers: --tokenizer NAME=DIR (repeatable); by default qwen3, llama3 and deepseek_v3 from
$MICROLLM_TOKENIZER_CACHE or build/.cache/tokenizers (scripts/fetch_tokenizers.sh).

Each record: samples = microllm's seconds per repetition (a pass over every string), peer =
HF's, ratio_of_medians = HF median / microllm median (> 1: microllm faster), "derived" MB/s
and tokens/s from the medians, and whether both sides produced the same ids (token count
and an FNV-1a checksum). --no-peer runs microllm alone (a smoke test without HF; records
have no peer). On a tree without .git set MICROLLM_GIT_COMMIT / MICROLLM_GIT_DIRTY
(tools/records/record.py). Exits 1 on an error or when the ids differ.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parents[1]
sys.path.insert(0, str(REPO_ROOT / "tools" / "records"))
import record  # noqa: E402

DEFAULT_TOKENIZERS = ("qwen3", "llama3", "deepseek_v3")


def english_text(target_bytes: int) -> tuple[str, list[str]]:
    """The parity corpus's English sources, whole files, until target_bytes."""
    spec = importlib.util.spec_from_file_location("make_corpus", REPO_ROOT / "tests" / "tokenizer" / "make_corpus.py")
    make_corpus = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(make_corpus)
    parts, used, total = [], [], 0
    for path in make_corpus.english_files():
        if total >= target_bytes:
            break
        with open(path, "rb") as f:
            text = f.read().decode("utf-8", "replace")
        parts.append(text if text.endswith("\n") else text + "\n")
        used.append(path)
        total += len(parts[-1].encode())
    return "\n".join(parts), used


def chunk_text(text: str, chunk_bytes: int) -> list[str]:
    """Paragraphs (cut after each blank line) packed into strings of at most chunk_bytes."""
    paragraphs = text.split("\n\n")
    chunks, current, size = [], [], 0
    for i, para in enumerate(paragraphs):
        piece = para + ("\n\n" if i + 1 < len(paragraphs) else "")
        n = len(piece.encode())
        if current and size + n > chunk_bytes:
            chunks.append("".join(current))
            current, size = [], 0
        current.append(piece)
        size += n
    if current:
        chunks.append("".join(current))
    return [c for c in chunks if c]


def run_side(name: str, argv: list[str], env: dict | None, raw_dir: Path | None, tag: str) -> tuple[dict | None, str | None]:
    print(f"run_tokenizer_bench: {' '.join(argv)}", file=sys.stderr, flush=True)
    try:
        done = subprocess.run(argv, stdout=subprocess.PIPE, text=True, env=env, check=False)
    except OSError as e:
        return None, f"{name} could not start: {e}"
    if raw_dir is not None:
        raw_dir.mkdir(parents=True, exist_ok=True)
        (raw_dir / f"{tag}_{name}.json").write_text(done.stdout, encoding="utf-8")
    try:
        doc = json.loads(done.stdout.strip().splitlines()[-1])
    except (json.JSONDecodeError, IndexError) as e:
        return None, f"{name} exited {done.returncode} without a JSON document ({e})"
    if doc.get("error"):
        return doc, f"{name}: {doc['error']}"
    if done.returncode != 0:
        return doc, f"{name} exited {done.returncode}"
    return doc, None


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def rates(doc: dict | None, summary: dict | None) -> dict | None:
    if not doc or not summary or not summary.get("median"):
        return None
    median = summary["median"]
    return {"median_s": median, "mb_per_s": doc["bytes"] / median / 1e6,
            "tokens_per_s": doc["tokens"] / median}


def fmt(value, spec: str) -> str:
    return "—" if value is None else format(value, spec)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("bench", nargs="?", help="path of microllm_bench_tokenizer")
    p.add_argument("--tokenizer", action="append", default=[], metavar="NAME=DIR")
    p.add_argument("--text", help="UTF-8 text file (default: the parity corpus's English sources)")
    p.add_argument("--text-bytes", type=int, default=4_000_000)
    p.add_argument("--save-text", help="write the default text to this file and exit")
    p.add_argument("--chunk-bytes", type=int, default=4096)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--repetitions", type=int, default=10)
    p.add_argument("--python", default=sys.executable, help="interpreter with `tokenizers`")
    p.add_argument("--hf-script", default=str(HERE / "hf_tokenizer_bench.py"))
    p.add_argument("--no-peer", action="store_true", help="microllm only (no HF; records have no peer)")
    p.add_argument("--records-dir", default=str(record.DEFAULT_RECORDS_DIR))
    p.add_argument("--raw-dir", help="also keep both programs' JSON here")
    p.add_argument("--work", help="folder for the strings file (default: a temporary one)")
    args = p.parse_args(argv)

    if args.save_text:
        text, used = english_text(args.text_bytes)
        Path(args.save_text).write_text(text, encoding="utf-8")
        print(f"run_tokenizer_bench: wrote {len(text.encode())} bytes from {len(used)} files to {args.save_text}")
        return 0
    if not args.bench:
        p.error("the path of microllm_bench_tokenizer is required")

    # The strings both sides encode.
    if args.text:
        text_path = Path(args.text)
        text = text_path.read_bytes().decode("utf-8", "replace")
        text_source = {"file": str(text_path), "sha256": sha256(text_path)}
    else:
        text, used = english_text(args.text_bytes)
        if len(text.encode()) < 1_000_000:
            sys.exit("run_tokenizer_bench: under 1 MB of English under /usr/share; make the text "
                     "elsewhere with --save-text and pass it with --text")
        text_source = {"source": "tests/tokenizer/make_corpus.py english_files()", "files": len(used),
                       "first": used[0], "last": used[-1]}
    chunks = chunk_text(text, args.chunk_bytes)
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="microllm_tokbench_"))
    work.mkdir(parents=True, exist_ok=True)
    strings_path = work / "strings.jsonl"
    with open(strings_path, "w", encoding="ascii") as f:
        for c in chunks:
            f.write(json.dumps(c, ensure_ascii=True) + "\n")
    text_bytes = sum(len(c.encode()) for c in chunks)
    print(f"run_tokenizer_bench: {text_bytes} bytes in {len(chunks)} strings -> {strings_path}", file=sys.stderr)

    cache = Path(os.environ.get("MICROLLM_TOKENIZER_CACHE", REPO_ROOT / "build" / ".cache" / "tokenizers"))
    pairs = [t.split("=", 1) for t in args.tokenizer] or [[n, str(cache / n)] for n in DEFAULT_TOKENIZERS]
    raw_dir = Path(args.raw_dir) if args.raw_dir else None
    hf_env = dict(os.environ, RAYON_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false")
    host = record.host_info()
    git = record.git_state()
    if git["commit"] == "unknown":
        print("run_tokenizer_bench: warning: no .git and no MICROLLM_GIT_COMMIT: records are marked "
              "dirty with an unknown commit", file=sys.stderr)
    created = record.utc_now()
    failed, rows = False, []
    for pair in pairs:
        if len(pair) != 2:
            sys.exit(f"run_tokenizer_bench: --tokenizer takes NAME=DIR, got {pair[0]!r}")
        name, directory = pair
        common = ["--tokenizer", directory, "--input", str(strings_path),
                  "--warmup", str(args.warmup), "--repetitions", str(args.repetitions)]
        ours_argv = [args.bench] + common
        ours, ours_error = run_side("microllm", ours_argv, None, raw_dir, name)
        peer_argv = [args.python, args.hf_script] + common
        peer, peer_error = (None, None) if args.no_peer else run_side("hf_tokenizers", peer_argv, hf_env, raw_dir, name)

        same_ids = None
        if ours and peer and not ours_error and not peer_error:
            same_ids = ours["tokens"] == peer["tokens"] and ours["ids_fnv1a"] == peer["ids_fnv1a"]
        tokenizer_json = Path(directory) / "tokenizer.json"
        config = {
            "tokenizer": name,
            "tokenizer_dir": directory,
            "tokenizer_json_sha256": sha256(tokenizer_json) if tokenizer_json.is_file() else None,
            "text": text_source,
            "text_sha256": hashlib.sha256(text.encode()).hexdigest(),
            "text_bytes": text_bytes,
            "strings": len(chunks),
            "chunk_bytes": args.chunk_bytes,
            "tokens": {"microllm": (ours or {}).get("tokens"), "hf_tokenizers": (peer or {}).get("tokens")},
            "warmup": args.warmup,
            "repetitions": args.repetitions,
            "threads": 1,
            "method": ("one repetition = encode every string once, one call per string, "
                       "add_special_tokens=False, one thread; per-word BPE caches warm after the "
                       "warm-up on both sides; HF with RAYON_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false"),
            "commands": {"microllm": ours_argv, "hf_tokenizers": None if args.no_peer else peer_argv},
            "load_s": {"microllm": (ours or {}).get("load_s"), "hf_tokenizers": (peer or {}).get("load_s")},
        }
        versions = dict((peer or {}).get("versions") or {})
        rec = record.make_record(
            "tokenizer", config, (ours or {}).get("samples_s", []) if not ours_error else [], "s",
            peer=None if args.no_peer else {"name": "hf_tokenizers",
                                            "samples": (peer or {}).get("samples_s", []) if not peer_error else []},
            host=host, versions=versions, git=git, created=created)
        ours_rates = rates(ours, rec["summary"])
        peer_rates = rates(peer, (rec.get("peer") or {}).get("summary"))
        rec["derived"] = {"from": "medians: MB/s = text bytes / median seconds (1 MB = 1e6 bytes)",
                          "microllm": ours_rates, "hf_tokenizers": peer_rates}
        rec["ids_equal"] = same_ids
        rec["errors"] = {"microllm": ours_error, "hf_tokenizers": peer_error}
        path = record.write_record(rec, f"encode_{name}", args.records_dir)
        print(f"run_tokenizer_bench: wrote {path}", file=sys.stderr)
        for side, error in (("microllm", ours_error), ("hf_tokenizers", peer_error)):
            if error:
                print(f"run_tokenizer_bench: {name}: {error}", file=sys.stderr)
        if same_ids is False:
            print(f"run_tokenizer_bench: {name}: the ids differ (microllm {ours['tokens']} tokens, "
                  f"HF {peer['tokens']})", file=sys.stderr)
        failed |= bool(ours_error or peer_error) or same_ids is False
        rows.append((name, ours_rates, peer_rates, (rec.get("ratio_of_medians") or {}).get("value"), same_ids))

    head = f"{'tokenizer':<14} {'microllm MB/s':>14} {'HF MB/s':>9} {'ratio':>7} {'ids equal':>10}"
    print(head)
    print("-" * len(head))
    for name, o, q, ratio, same in rows:
        print(f"{name:<14} {fmt(o and o['mb_per_s'], '.2f'):>14} {fmt(q and q['mb_per_s'], '.2f'):>9} "
              f"{fmt(ratio, '.2f'):>7} {('—' if same is None else 'yes' if same else 'NO'):>10}")
    print("ratio = HF median / microllm median (> 1: microllm faster); one thread each")
    return 1 if failed or not rows else 0


if __name__ == "__main__":
    sys.exit(main())
