#!/usr/bin/env python3
"""Serving benchmark: `microllm serve` under streaming load from microllm_bench_serve, with
the static-batch peers in the same run, one record of kind "serve" per concurrency.

  python3 bench/serve/run_serve_bench.py --microllm build/cuda-release/apps/microllm/microllm \\
      --bench-serve build/cuda-release/bench/microllm_bench_serve \\
      --bench-generate build/cuda-release/bench/microllm_bench_generate \\
      --model-dir DIR [--concurrency 1,8,32,128,256] [--reps 3] [--peers generate,hf] \\
      [--records-dir bench/records] [--raw-dir DIR] [--table-out FILE]

DIR is a Hugging Face folder (bench/serve/make_serve_model.py makes one with random weights).
The server runs once (`--max-num-seqs` = the largest concurrency); per concurrency C and
repetition, C clients send 4·C requests (at least 8) of random prompt lengths and output
lengths (--prompt-len, --output-len, uniform), greedy, `ignore_eos`. One more run at
--text-concurrency sends text prompts, so that the server's tokenizer works too (its cost is
reported, not recorded as throughput).

A record's samples are the server's output tokens/s per repetition (completion tokens of
all requests / wall time from the first send to the last [DONE]). Its peer is microllm's
static-batch engine (microllm_bench_generate, batch C, every prompt of the mean prompt length,
the mean output length, no server), whose samples are end-to-end tokens/s per repetition:
B·N / (TTFT + B·(N − 1) / decode tokens/s). transformers' batched `generate` at the same batch
and lengths (bench/generate/torch_generate.py --peers hf) is a second peer (peers.hf_generate).
ratio_of_medians = serve / peer, > 1: the server is faster. Beside them per record: TTFT,
TPOT and inter-chunk latency (ITL) p50/p99, KV-cache use, preemptions, engine steps and the
engine thread's busy fraction, the HTTP threads' detokenization cost per output token.
On a tree without .git set MICROLLM_GIT_COMMIT and MICROLLM_GIT_DIRTY (see record.py).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parents[1]
sys.path.insert(0, str(REPO_ROOT / "tools" / "records"))
import record  # noqa: E402

PEER_NAMES = {"generate": "microllm generate: the static-batch engine, batch C, mean lengths, no server",
              "hf_generate": "transformers generate, batch C, mean lengths, SDPA, DynamicCache"}


def ints(text: str) -> list[int]:
    return [int(v) for v in text.split(",") if v]


def mean_of_range(text: str) -> int:
    lo, _, hi = text.partition(":")
    return (int(lo) + int(hi or lo)) // 2


def log(message: str) -> None:
    print(f"run_serve_bench: {message}", file=sys.stderr, flush=True)


def run_json(argv: list[str], out: Path, timeout: float) -> tuple[dict | None, str | None]:
    """Runs a program that writes a JSON document to `out`; (document, error)."""
    log(" ".join(argv))
    try:
        done = subprocess.run(argv, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return None, f"{Path(argv[0]).name} ran past {timeout:.0f} s"
    except OSError as e:
        return None, f"{argv[0]} could not start: {e}"
    try:
        doc = json.loads(out.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as e:
        return None, f"{Path(argv[0]).name} exited {done.returncode} without a JSON document ({e})"
    return doc, None if done.returncode == 0 else f"{Path(argv[0]).name} exited {done.returncode}"


class Server:
    """`microllm serve` on a free port; stopped with SIGINT."""

    def __init__(self, argv: list[str], log_path: Path, ready_timeout: float):
        self.log = open(log_path, "w", encoding="utf-8")
        log(" ".join(argv))
        self.proc = subprocess.Popen(argv, stderr=subprocess.PIPE, stdout=self.log, text=True)
        self.port = None
        deadline = time.time() + ready_timeout
        while self.port is None and time.time() < deadline:
            line = self.proc.stderr.readline()
            if not line:
                break
            self.log.write(line)
            m = re.search(r"listening on http://[^:]+:(\d+)", line)
            if m:
                self.port = int(m.group(1))
        if self.port is None:
            self.stop()
            raise RuntimeError(f"microllm serve did not report its port (log {log_path})")
        # The rest of stderr (one line per request) goes to the log from a thread.
        import threading
        self.pump = threading.Thread(target=self._pump, daemon=True)
        self.pump.start()
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"microllm serve exited {self.proc.returncode} (log {log_path})")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=5) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.5)
        self.stop()
        raise RuntimeError(f"microllm serve was not healthy within {ready_timeout:.0f} s (log {log_path})")

    def _pump(self) -> None:
        for line in self.proc.stderr:
            self.log.write(line)

    def stop(self) -> int | None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.flush()
        return self.proc.returncode


def side(values: list[float]) -> dict[str, Any]:
    return {"values": values, "summary": record.summarize(values) if values else None}


def end_to_end_tokens_per_s(batch: int, new_tokens: int, ttft_ms: float, decode_tps: float) -> float:
    """B·N / (TTFT + B·(N − 1) / decode tokens/s)."""
    return batch * new_tokens / (ttft_ms / 1e3 + batch * (new_tokens - 1) / decode_tps)


def peer_samples(doc: dict | None, batch: int, new_tokens: int) -> list[float]:
    s = (doc or {}).get("samples", {})
    return [end_to_end_tokens_per_s(batch, new_tokens, t, d)
            for t, d in zip(s.get("ttft_ms", []), s.get("decode_tokens_per_s", [])) if d > 0]


def per_run(doc: dict) -> dict[str, Any]:
    """What one load run measured, in the record's units (ms, fractions, µs per token)."""
    c = doc["counters"]
    wall = doc["wall_s"]

    def pick(key, stat, scale=1e3):
        v = (doc.get(key) or {}).get(stat)
        return None if v is None else v * scale

    generated = c.get("microllm:generation_tokens_total") or 0
    prompt = c.get("microllm:prompt_tokens_total") or 0
    steps = c.get("microllm:engine_steps_total") or 0
    return {
        "output_tokens_per_s": doc["output_tokens_per_s"], "total_tokens_per_s": doc["total_tokens_per_s"],
        "requests_per_s": doc["requests_per_s"], "wall_s": wall, "failed_requests": doc["failed_requests"],
        "ttft_ms_p50": pick("ttft_s", "p50"), "ttft_ms_p99": pick("ttft_s", "p99"),
        "tpot_ms_p50": pick("tpot_s", "p50"), "tpot_ms_p99": pick("tpot_s", "p99"),
        "itl_ms_p50": pick("itl_s", "p50"), "itl_ms_p99": pick("itl_s", "p99"),
        "kv_cache_usage_max": pick("kv_cache_usage", "max", 1), "kv_cache_usage_mean": pick("kv_cache_usage", "mean", 1),
        "running_mean": pick("running", "mean", 1), "waiting_max": pick("waiting", "max", 1),
        "preemptions": c.get("microllm:num_preemptions_total"),
        "engine_steps": steps,
        "engine_step_ms_mean": 1e3 * c["microllm:engine_step_seconds_total"] / steps if steps else None,
        "engine_busy_fraction": c.get("microllm:engine_step_seconds_total", 0) / wall if wall else None,
        "detokenize_us_per_output_token": 1e6 * c["microllm:detokenize_seconds_total"] / generated if generated else None,
        "tokenize_us_per_prompt_token": 1e6 * c["microllm:tokenize_seconds_total"] / prompt if prompt else None,
        "prompt_tokens": doc["prompt_tokens"], "completion_tokens": doc["completion_tokens"],
    }


def median_of(runs: list[dict], key: str) -> float | None:
    values = [r[key] for r in runs if r.get(key) is not None]
    return record.summarize(values)["median"] if values else None


def fmt(value: float | None, spec: str) -> str:
    return "—" if value is None else format(value, spec)


def table(records: list[dict[str, Any]]) -> str:
    head = (f"{'C':>4} {'serve tok/s':>11} {'generate':>9} {'ratio':>6} {'HF':>8} {'ratio':>6} "
            f"{'TTFT p50':>8} {'p99':>7} {'ITL p50':>7} {'p99':>6} {'TPOT p50':>8} {'KV max':>6} "
            f"{'preempt':>7} {'busy':>5} {'detok µs':>8}")
    lines = [head, "-" * len(head)]
    for r in records:
        d = r["derived"]
        lines.append(
            f"{r['config']['concurrency']:>4} {fmt(d.get('output_tokens_per_s'), ',.0f'):>11} "
            f"{fmt(d.get('generate_tokens_per_s'), ',.0f'):>9} {fmt(d.get('ratio_vs_generate'), '.2f'):>6} "
            f"{fmt(d.get('hf_generate_tokens_per_s'), ',.0f'):>8} {fmt(d.get('ratio_vs_hf_generate'), '.2f'):>6} "
            f"{fmt(d.get('ttft_ms_p50'), '.1f'):>8} {fmt(d.get('ttft_ms_p99'), '.1f'):>7} "
            f"{fmt(d.get('itl_ms_p50'), '.2f'):>7} {fmt(d.get('itl_ms_p99'), '.2f'):>6} {fmt(d.get('tpot_ms_p50'), '.2f'):>8} "
            f"{fmt(d.get('kv_cache_usage_max'), '.2f'):>6} {fmt(d.get('preemptions'), '.0f'):>7} "
            f"{fmt(d.get('engine_busy_fraction'), '.2f'):>5} {fmt(d.get('detokenize_us_per_output_token'), '.1f'):>8}")
        bad = {k: v for k, v in r["errors"].items() if v}
        if bad:
            lines.append(f"    errors: {bad}")
    lines.append("output tokens/s medians over repetitions; generate / HF: the static-batch peers at batch C "
                 "(end-to-end tokens/s); ratio = serve / peer (> 1: the server is faster); latencies in ms "
                 "(medians over repetitions of each run's p50/p99); KV max: peak fraction of KV blocks held; "
                 "busy: engine-step time / wall time; detok: HTTP-thread µs per output token")
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--microllm", required=True, help="the microllm executable (serve)")
    p.add_argument("--bench-serve", required=True, help="the microllm_bench_serve executable")
    p.add_argument("--bench-generate", help="the microllm_bench_generate executable (peer 'generate')")
    p.add_argument("--model-dir", required=True, help="Hugging Face folder with tokenizer.json")
    p.add_argument("--model-name", help="the name of the shape in records (default: the folder's name)")
    p.add_argument("--device", default="cuda")
    p.add_argument("--dtype", default="bf16")
    p.add_argument("--concurrency", default="1,8,32,128,256")
    p.add_argument("--requests-per-client", type=int, default=4)
    p.add_argument("--prompt-len", default="100:1000")
    p.add_argument("--output-len", default="100:1000")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--text-concurrency", type=int, default=32, help="the text-prompt run (0: none)")
    p.add_argument("--serve-args", default="", help="more arguments for microllm serve")
    p.add_argument("--peers", default="generate,hf", help="generate, hf, both or none")
    p.add_argument("--peer-reps", type=int, default=3, help="repetitions of microllm_bench_generate")
    p.add_argument("--python", default=sys.executable, help="interpreter with torch + transformers")
    p.add_argument("--torch-script", default=str(REPO_ROOT / "bench" / "generate" / "torch_generate.py"))
    p.add_argument("--timeout", type=float, default=900, help="seconds per program run")
    p.add_argument("--records-dir", default=str(record.DEFAULT_RECORDS_DIR))
    p.add_argument("--raw-dir", help="raw JSON and the server log (default RECORDS_DIR/raw/<UTC time>-serve)")
    p.add_argument("--table-out", help="also write the table to this file")
    args = p.parse_args(argv)
    args.concurrency = ints(args.concurrency)
    args.peers = [x for x in args.peers.split(",") if x and x != "none"]
    bad = [x for x in args.peers if x not in ("generate", "hf")]
    if bad:
        p.error(f"--peers takes generate, hf or none, found {', '.join(bad)}")
    if "generate" in args.peers and not args.bench_generate:
        p.error("--peers generate needs --bench-generate")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    stamp = record.utc_now().strftime("%Y%m%dT%H%M%SZ")
    raw = Path(args.raw_dir) if args.raw_dir else Path(args.records_dir) / "raw" / f"{stamp}-serve"
    raw.mkdir(parents=True, exist_ok=True)
    model_dir = Path(args.model_dir)
    name = args.model_name or model_dir.resolve().name
    config = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
    vocab = int(config["vocab_size"])
    max_c = max(args.concurrency)
    serve_argv = [args.microllm, "serve", "--model", str(model_dir), "--device", args.device, "--dtype", args.dtype,
                  "--port", "0", "--served-model-name", name, "--max-num-seqs", str(max_c), *args.serve_args.split()]

    def load(c: int, rep: int, tag: str, extra: list[str], requests: int | None = None) -> tuple[dict | None, str | None]:
        out = raw / f"serve-{name}-c{c}-{tag}{rep}.json"
        n = requests or max(8, args.requests_per_client * c)
        argv = [args.bench_serve, "--port", str(server.port), "--model", name, "--concurrency", str(c),
                "--requests", str(n), "--prompt-len", args.prompt_len, "--output-len", args.output_len,
                "--vocab", str(vocab), "--seed", str(1000 * c + rep), "--timeout", str(args.timeout),
                "--out", str(out), *extra]
        return run_json(argv, out, args.timeout)

    runs: dict[int, list[tuple[dict | None, str | None]]] = {}
    text_run, serve_error = None, None
    try:
        server = Server(serve_argv, raw / "serve.log", ready_timeout=600)
    except RuntimeError as e:
        log(str(e))
        return 1
    try:
        load(min(8, max_c), 0, "warmup", ["--output-len", "16:64"], requests=16)
        for c in args.concurrency:
            runs[c] = [load(c, rep, "rep", []) for rep in range(args.reps)]
        if args.text_concurrency > 0:
            text_run = load(args.text_concurrency, 0, "text",
                            ["--prompts", "text", "--tokenizer", str(model_dir)])
    finally:
        code = server.stop()
        if code not in (0, None):
            serve_error = f"microllm serve exited {code}"

    prompt_mean, output_mean = mean_of_range(args.prompt_len), mean_of_range(args.output_len)
    peer_docs: dict[str, dict[int, dict | None]] = {"generate": {}, "hf_generate": {}}
    peer_errors: dict[str, dict[int, str | None]] = {"generate": {}, "hf_generate": {}}
    peer_argv: dict[str, Any] = {}
    if "generate" in args.peers:
        for c in args.concurrency:
            out = raw / f"generate-{name}-b{c}.json"
            argv = [args.bench_generate, "--config", str(model_dir / "config.json"), "--device", args.device,
                    "--dtype", args.dtype, "--batch", str(c), "--context", str(prompt_mean),
                    "--new-tokens", str(output_mean), "--warmup", "1", "--reps", str(args.peer_reps),
                    "--out", str(out)]
            peer_argv.setdefault("generate", []).append(argv)
            peer_docs["generate"][c], peer_errors["generate"][c] = run_json(argv, out, args.timeout)
    if "hf" in args.peers:
        out = raw / f"torch-{name}.json"
        argv = [args.python, args.torch_script, "--config", str(model_dir / "config.json"),
                "--batch", ",".join(map(str, args.concurrency)), "--context", str(prompt_mean),
                "--new-tokens", str(output_mean), "--warmup", "1", "--reps", "1", "--hf-reps", "1",
                "--peers", "hf", "--out", str(out)]
        peer_argv["hf_generate"] = argv
        doc, error = run_json(argv, out, 4 * args.timeout)
        for c in args.concurrency:
            match = [x for x in (doc or {}).get("cases", []) if x.get("peer") == "hf_generate" and x.get("batch") == c]
            peer_docs["hf_generate"][c] = match[0] if match else None
            peer_errors["hf_generate"][c] = (match[0].get("error") if match else None) or (None if match else error or "not run")
        versions = (doc or {}).get("versions") or {}
    else:
        versions = {}

    host, git, created = record.host_info(), record.git_state(), record.utc_now()
    text_summary = per_run(text_run[0]) if text_run and text_run[0] else None
    records, failed = [], serve_error is not None
    for c in args.concurrency:
        docs = [doc for doc, _ in runs[c] if doc]
        measured = [per_run(doc) for doc in docs]
        errors = {"serve": "; ".join(e for _, e in runs[c] if e) or serve_error or (None if docs else "no runs")}
        samples = [m["output_tokens_per_s"] for m in measured]
        peers = {}
        for peer in ("generate", "hf_generate"):
            if peer not in peer_docs or c not in peer_docs[peer]:
                continue
            values = peer_samples(peer_docs[peer][c], c, output_mean)
            peers[peer] = values
            errors[peer] = peer_errors[peer].get(c) or (None if values else "no samples")
        primary = "generate" if "generate" in peers else ("hf_generate" if "hf_generate" in peers else None)
        cfg = {
            "case": f"{name}-c{c}", "model": name, "model_type": config.get("model_type"),
            "concurrency": c, "requests_per_rep": max(8, args.requests_per_client * c), "reps": args.reps,
            "prompt_len": args.prompt_len, "output_len": args.output_len, "prompts": "random token ids",
            "decoding": "greedy, ignore_eos (each request runs to its max_tokens)", "device": args.device,
            "dtype": args.dtype, "weights": "random (bench/serve/make_serve_model.py)",
            "peer_shape": {"batch": c, "context": prompt_mean, "new_tokens": output_mean},
            "definitions": {
                "output_tokens_per_s": "completion tokens of all requests / (first send → last [DONE])",
                "peer tokens/s": "B·N / (TTFT + B·(N − 1) / decode tokens/s) of one static batch",
                "ttft": "send → first chunk with text", "tpot": "(end − TTFT) / (completion tokens − 1)",
                "itl": "gap between successive text chunks of a stream"},
            "commands": {"serve": serve_argv, "load": [doc.get("config") for doc in docs], "peers": peer_argv},
        }
        rec = record.make_record("serve", cfg, samples, "tokens/s",
                                 peer={"name": PEER_NAMES[primary], "samples": peers[primary]} if primary else None,
                                 host=host, versions=versions, git=git, created=created, higher_is_better=True)
        derived: dict[str, Any] = {key: median_of(measured, key) for key in (measured[0] if measured else {})}
        serve_median = rec["summary"]["median"] if rec["summary"] else None
        others = {}
        for peer, values in peers.items():
            med = record.summarize(values)["median"] if values else None
            derived[f"{peer}_tokens_per_s"] = med
            derived[f"ratio_vs_{peer}"] = serve_median / med if serve_median and med else None
            if peer != primary:
                others[peer] = {"name": PEER_NAMES[peer], "samples": {"units": "tokens/s", "values": values},
                                "summary": record.summarize(values) if values else None}
        derived.setdefault("output_tokens_per_s", serve_median)
        rec.update({"peers": others, "derived": derived, "runs": measured, "errors": errors,
                    "text_prompt_run": text_summary})
        problems = record.validate(rec)
        if problems:
            log(f"{cfg['case']}: invalid record: {problems}")
            failed = True
            continue
        written = record.write_record(rec, cfg["case"], args.records_dir)
        log(f"wrote {written}")
        records.append(rec)
        failed |= any(v for v in errors.values())
    text = table(records)
    if text_summary:
        text += (f"\ntext prompts at concurrency {args.text_concurrency}: tokenize "
                 f"{fmt(text_summary['tokenize_us_per_prompt_token'], '.2f')} µs per prompt token, detokenize "
                 f"{fmt(text_summary['detokenize_us_per_output_token'], '.2f')} µs per output token "
                 f"(HTTP threads), engine busy {fmt(text_summary['engine_busy_fraction'], '.2f')}")
    if args.table_out:
        Path(args.table_out).write_text(text + "\n", encoding="utf-8")
    print(text, flush=True)
    return 1 if failed or not records else 0


if __name__ == "__main__":
    sys.exit(main())
