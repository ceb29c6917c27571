#!/usr/bin/env bash
# Serving benchmark on the GPU machine (one H200): `microllm serve` under streaming load, with
# the static-batch peers (microllm's engine without a server, transformers' batched generate)
# in the same call. Builds the model folder first (bench/serve/make_serve_model.py: random
# BF16 weights of the shape by transformers, a tokenizer covering its vocabulary) outside
# $OUT, then runs bench/serve/run_serve_bench.py, which writes one record of kind "serve" per
# concurrency to $OUT/records/serve/ and the raw JSON, the server log and the table to
# $OUT/bench-raw/; both are packed into $OUT/serve.tar.gz. The table is printed last.
# Arguments pass to run_serve_bench.py.
#
#   OUT=/tmp/out MICROLLM_GIT_COMMIT=$(git rev-parse HEAD) MICROLLM_GIT_DIRTY=0 \
#     scripts/gpu/serve_bench.sh [--concurrency 1,8,32,128,256] [--reps 3]
#   # here, afterwards: tar -xzf serve.tar.gz -C bench/ records   (→ bench/records/serve/)
#
# Settings (environment): BUILD_DIR (build/cuda-release), MICROLLM, BENCH_SERVE,
# BENCH_GENERATE (the binaries; default under BUILD_DIR), SHAPE (qwen2.5-0.5b: a folder of
# tests/fixtures/configs/), MODEL_DIR (an existing model folder: skips making one), PYTHON
# (python3 with torch + transformers), PACK_RECORDS (1).
set -uo pipefail

OUT=${OUT:-./out}
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT" || exit 1

BUILD_DIR=${BUILD_DIR:-build/cuda-release}
MICROLLM=${MICROLLM:-$BUILD_DIR/apps/microllm/microllm}
BENCH_SERVE=${BENCH_SERVE:-$BUILD_DIR/bench/microllm_bench_serve}
BENCH_GENERATE=${BENCH_GENERATE:-$BUILD_DIR/bench/microllm_bench_generate}
SHAPE=${SHAPE:-qwen2.5-0.5b}
PYTHON=${PYTHON:-python3}
PACK_RECORDS=${PACK_RECORDS:-1}
start=$(date +%s)
log() { echo "[gpu/serve_bench $(($(date +%s) - start)) s] $*"; }

for bin in "$MICROLLM" "$BENCH_SERVE" "$BENCH_GENERATE"; do
  if [ ! -x "$bin" ]; then
    log "FAILED: $bin is missing: build the cuda-release preset with -DMICROLLM_WITH_SERVER=ON"
    exit 1
  fi
done
if [ ! -d .git ] && [ -z "${MICROLLM_GIT_COMMIT:-}" ]; then
  log "warning: no .git and MICROLLM_GIT_COMMIT unset: records will say commit unknown, dirty"
fi
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw \
  --format=csv 2>/dev/null

if [ -z "${MODEL_DIR:-}" ]; then
  MODEL_DIR=$(mktemp -d)/$SHAPE
  log "making $MODEL_DIR"
  "$PYTHON" bench/serve/make_serve_model.py --config "tests/fixtures/configs/$SHAPE/config.json" \
    --out "$MODEL_DIR" || { log "FAILED: make_serve_model.py"; exit 1; }
fi

records="$OUT/records"
raw="$OUT/bench-raw"
mkdir -p "$records" "$raw"
PYTHONUNBUFFERED=1 "$PYTHON" bench/serve/run_serve_bench.py --microllm "$MICROLLM" \
  --bench-serve "$BENCH_SERVE" --bench-generate "$BENCH_GENERATE" --model-dir "$MODEL_DIR" \
  --model-name "$SHAPE" --python "$PYTHON" --records-dir "$records" --raw-dir "$raw" \
  --table-out "$raw/serve-table.txt" "$@" 2>&1 | tee "$OUT/serve-bench.log" | grep -v '^{'
bench_rc=${PIPESTATUS[0]}
log "run_serve_bench.py exit $bench_rc"

table=""
[ -f "$raw/serve-table.txt" ] && table=$(cat "$raw/serve-table.txt")
if [ "$PACK_RECORDS" = "1" ]; then
  if tar -czf "$OUT/serve.tar.gz" -C "$OUT" records bench-raw; then
    rm -rf "$records" "$raw"
    log "records packed: $OUT/serve.tar.gz"
  else
    log "packing failed: records left in $records"
  fi
fi
echo
echo "${table:-no table: see serve-bench.log}"
exit "$bench_rc"
