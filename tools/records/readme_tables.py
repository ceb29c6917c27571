#!/usr/bin/env python3
"""Tables of published numbers, generated from committed records.

The README shows benchmark figures only between marker lines

    <!-- records:ops:begin -->  ...  <!-- records:ops:end -->

and every such block must equal what this tool generates from bench/records/. A record
made with a dirty tree is never cited, nor one run under MICROLLM_* switches (config.switches:
not the default build), nor one from another GPU than the README's (the H200; records from
other cards stay in bench/records/ and are cited in the docs). For each case the newest clean
record is used.
Kinds: ops, train, tokenizer, generate (decode throughput, bench/generate/run_generate_bench.py),
serve (serving throughput, bench/serve/run_serve_bench.py).

    readme_tables.py --check [README.md]   exit 1 when a block differs from the records
    readme_tables.py --write [README.md]   rewrite the blocks
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
RECORDS = REPO_ROOT / "bench" / "records"
README_GPU = "H200"  # the card the README's tables speak of


# What names a case in each kind's records (the newest clean record per case is shown).
CASE_KEYS = {
    "ops": lambda c: c["case"],
    "train": lambda c: f"{Path(c['config']).parent.name} B{c['batch']} T{c['seq']}"
                       + (f" loss chunk {c['loss_chunk']}" if c.get("loss_chunk") else "")
                       + (f" attention {c['attention']}" if c.get("attention") else ""),
    "tokenizer": lambda c: c["tokenizer"],
    "generate": lambda c: c["case"],
    "serve": lambda c: c["case"],
}


def load_records(kind: str, records_dir: Path = RECORDS) -> list[dict]:
    """Clean records of `kind`, newest per case, in case-name order."""
    newest: dict[str, dict] = {}
    for path in sorted((records_dir / kind).glob("*.json")):
        record = json.loads(path.read_text())
        if record.get("git", {}).get("dirty", True) or "summary" not in record:
            continue
        if (record.get("config") or {}).get("switches"):
            continue  # a side of an A/B under MICROLLM_* switches: not the default build
        gpu = (record.get("host") or {}).get("gpu")
        if gpu and README_GPU not in gpu:
            continue
        record["_file"] = path.name
        case = CASE_KEYS[kind](record["config"])
        record["_case"] = case
        if case not in newest or record["created_utc"] > newest[case]["created_utc"]:
            newest[case] = record
    return [newest[c] for c in sorted(newest)]


def ops_table(records: list[dict]) -> str:
    lines = [
        "| case | microllm median | PyTorch median | PyTorch / microllm | achieved | of ceiling | commit |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in records:
        derived = r["derived"]["microllm"]
        peer = r.get("peer", {}).get("summary", {}).get("median")
        ratio = r.get("ratio_of_medians", {}).get("value")
        if r["config"].get("bound") == "compute":
            achieved = f"{derived['achieved_tflops']:.0f} TFLOP/s"
        else:
            achieved = f"{derived['achieved_tbps']:.2f} TB/s"
        lines.append(
            f"| `{r['config']['case']}` | {r['summary']['median']:.4f} ms | "
            + (f"{peer:.4f} ms" if peer is not None else "—") + " | "
            + (f"{ratio:.2f}×" if ratio is not None else "—") + f" | {achieved} | "
            f"{100 * derived['ceiling_fraction']:.0f} % | `{r['git']['commit'][:7]}` |")
    return "\n".join(lines)


def train_table(records: list[dict]) -> str:
    """Training throughput; the ratios are PyTorch's step time over microllm's (> 1: microllm
    faster). Records before the torch.compile peer was added show "—" for it, records before
    MFU and stage times were recorded "—" for those."""
    lines = ["| model shape | tokens per step | microllm tokens/s | PyTorch eager tokens/s | eager / microllm "
             "| torch.compile tokens/s | compile / microllm | MFU microllm / compile "
             "| forward / backward / optimizer ms | microllm peak GiB | commit |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in records:
        d = r["derived"]
        mine = d["microllm_tokens_per_s"]
        peer = d.get("peer_tokens_per_s")
        ratio = r.get("ratio_of_medians", {}).get("value")
        compiled = (d.get("compiled_peer") or {}).get("tokens_per_s")
        peak = d.get("microllm_peak_bytes")
        mfu = d.get("mfu") or {}
        mfu_cell = (f"{100 * mfu['microllm']:.1f} % / "
                    + (f"{100 * mfu['compiled_peer']:.1f} %" if mfu.get("compiled_peer") is not None else "—")
                    if mfu.get("microllm") is not None else "—")
        stages = d.get("microllm_stage_ms")
        stage_cell = (f"{stages['forward']:.1f} / {stages['backward']:.1f} / {stages['optimizer']:.1f}"
                      if stages else "—")
        lines.append(f"| {r['_case']} ({r['config']['dtype']}) | {r['config']['tokens_per_step']:,} | "
                     f"{mine:,.0f} | " + (f"{peer:,.0f}" if peer else "—") + " | "
                     + (f"{ratio:.2f}×" if ratio is not None else "—") + " | "
                     + (f"{compiled:,.0f} | {mine / compiled:.2f}×" if compiled else "— | —") + " | "
                     + f"{mfu_cell} | {stage_cell} | "
                     + (f"{peak / 2**30:.1f}" if peak else "—") + f" | `{r['git']['commit'][:7]}` |")
    return "\n".join(lines)


def tokenizer_table(records: list[dict]) -> str:
    lines = ["| tokenizer | text | microllm MB/s | HF tokenizers MB/s | HF / microllm time | same ids | commit |",
             "|---|---|---|---|---|---|---|"]
    for r in records:
        d = r["derived"]
        c = r["config"]
        ratio = r.get("ratio_of_medians", {}).get("value")
        same = c["tokens"]["microllm"] == c["tokens"].get("hf_tokenizers")
        lines.append(f"| {c['tokenizer']} | {c['text_bytes'] / 1e6:.1f} MB | {d['microllm']['mb_per_s']:.1f} | "
                     f"{d['hf_tokenizers']['mb_per_s']:.2f} | " + (f"{ratio:.1f}×" if ratio is not None else "—")
                     + f" | {'yes' if same else 'no'} | `{r['git']['commit'][:7]}` |")
    return "\n".join(lines)


def generate_table(records: list[dict]) -> str:
    """Decode throughput per (model shape, batch, context, decode mode), from
    run_generate_bench.py's records; ratios > 1 mean microllm is faster (decode: microllm /
    PyTorch tokens/s). Records made before CUDA-graph decode existed carry no mode: eager."""
    lines = ["| model shape | batch | context | new tokens | decode | microllm tokens/s | "
             "PyTorch compiled tokens/s | microllm / PyTorch | HF generate tokens/s | microllm / HF | "
             "TTFT microllm / PyTorch | host ms / step | kernels / step | microllm peak | commit |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]

    def num(value, spec):
        return "—" if value is None else format(value, spec)

    def mode(r):
        return r["config"].get("microllm_mode", "eager")
    for r in sorted(records, key=lambda r: (r["config"]["model"], r["config"]["batch"], r["config"]["context"],
                                            mode(r) != "graphs")):
        c, d = r["config"], r["derived"]
        peak = (r.get("memory") or {}).get("microllm", {}).get("peak_memory_bytes")
        ttft = (f"{num(d.get('microllm_ttft_ms'), '.1f')} / {num(d.get('static_compiled_ttft_ms'), '.1f')} ms"
                if d.get("microllm_ttft_ms") is not None else "—")
        ratio = (r.get("ratio_of_medians") or {}).get("value")
        lines.append(
            f"| {c['model']} | {c['batch']} | {c['context']:,} | {c['new_tokens']} | {mode(r)} | "
            f"{num(d.get('microllm_decode_tokens_per_s'), ',.0f')} | "
            f"{num(d.get('static_compiled_decode_tokens_per_s'), ',.0f')} | "
            + (f"{ratio:.2f}×" if ratio is not None else "—") + " | "
            f"{num(d.get('hf_generate_decode_tokens_per_s'), ',.0f')} | "
            + (f"{d['decode_tokens_per_s_ratio_vs_hf_generate']:.2f}×"
               if d.get("decode_tokens_per_s_ratio_vs_hf_generate") is not None else "—") + " | "
            f"{ttft} | {num(d.get('microllm_host_ms_per_step'), '.3f')} | {num(r.get('kernels_per_step'), 'd')} | "
            + (f"{peak / 2**30:.2f} GiB" if peak else "—") + f" | `{r['git']['commit'][:7]}` |")
    return "\n".join(lines)


def serve_table(records: list[dict]) -> str:
    """Serving throughput per (model shape, concurrency), from run_serve_bench.py's records;
    ratios > 1 mean the server is faster than the static-batch peer."""
    lines = ["| model shape | concurrency | serve output tokens/s | microllm generate (static batch) | "
             "serve / generate | HF generate | serve / HF | TTFT p50 / p99 | ITL p50 / p99 | "
             "KV use (max) | preemptions | commit |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]

    def num(value, spec):
        return "—" if value is None else format(value, spec)

    def ratio(value):
        return "—" if value is None else f"{value:.2f}×"
    for r in sorted(records, key=lambda r: (r["config"]["model"], r["config"]["concurrency"])):
        c, d = r["config"], r["derived"]
        lines.append(
            f"| {c['model']} | {c['concurrency']} | {num(d.get('output_tokens_per_s'), ',.0f')} | "
            f"{num(d.get('generate_tokens_per_s'), ',.0f')} | {ratio(d.get('ratio_vs_generate'))} | "
            f"{num(d.get('hf_generate_tokens_per_s'), ',.0f')} | {ratio(d.get('ratio_vs_hf_generate'))} | "
            f"{num(d.get('ttft_ms_p50'), ',.0f')} / {num(d.get('ttft_ms_p99'), ',.0f')} ms | "
            f"{num(d.get('itl_ms_p50'), '.1f')} / {num(d.get('itl_ms_p99'), '.1f')} ms | "
            f"{num(d.get('kv_cache_usage_max'), '.0%')} | {num(d.get('preemptions'), '.0f')} | "
            f"`{r['git']['commit'][:7]}` |")
    return "\n".join(lines)


GENERATORS = {"ops": lambda: ops_table(load_records("ops")),
              "train": lambda: train_table(load_records("train")),
              "tokenizer": lambda: tokenizer_table(load_records("tokenizer")),
              "generate": lambda: generate_table(load_records("generate")),
              "serve": lambda: serve_table(load_records("serve"))}
BLOCK = re.compile(r"(<!-- records:(\w+):begin -->\n)(.*?)(<!-- records:\2:end -->)", re.S)


def render(text: str) -> str:
    def replace(match: re.Match) -> str:
        kind = match.group(2)
        if kind not in GENERATORS:
            raise SystemExit(f"readme_tables: unknown block kind '{kind}'")
        return match.group(1) + GENERATORS[kind]() + "\n" + match.group(4)
    return BLOCK.sub(replace, text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--check", action="store_true")
    mode.add_argument("--write", action="store_true")
    parser.add_argument("readme", nargs="?", default=str(REPO_ROOT / "README.md"))
    args = parser.parse_args(argv)
    path = Path(args.readme)
    text = path.read_text()
    expected = render(text)
    if args.write:
        path.write_text(expected)
        return 0
    if expected != text:
        print(f"readme_tables: {path} differs from the records; run tools/records/readme_tables.py --write",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
