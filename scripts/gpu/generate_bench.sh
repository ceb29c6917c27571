#!/usr/bin/env bash
# Decode benchmark on the GPU machine (one H200), microllm against PyTorch in one call: uses
# build/cuda-release/bench/microllm_bench_generate when it is there (a binary built here and
# carried with the tree runs unchanged), else builds that one target; then runs
# bench/generate/run_generate_bench.py, which runs the driver per (model shape, batch,
# context) case and bench/generate/torch_generate.py (transformers generate and the compiled
# static-cache model) per model shape, and writes one record per case (kind "generate",
# ratio = microllm / peer tokens/s, > 1: microllm faster). Records go to
# $OUT/records/generate/ (./out when OUT is unset), the raw JSON of both programs and the
# table to $OUT/bench-raw/; both are packed into $OUT/generate-<UTC time>.tar.gz and removed
# from $OUT (PACK_RECORDS=0 leaves them loose; other benchmarks' records are left alone). The table is printed last. Arguments pass to run_generate_bench.py.
#
#   OUT=/tmp/out MICROLLM_GIT_COMMIT=$(git rev-parse HEAD) MICROLLM_GIT_DIRTY=0 \
#     scripts/gpu/generate_bench.sh --quick
#   scripts/gpu/generate_bench.sh --models qwen2.5-0.5b --batch 1,8 --context 8,512,2048
#   # here, afterwards: tar -xzf generate-*.tar.gz -C bench/ records/generate   (→ bench/records/generate/)
#
# The full matrix (2 model shapes × batch 1,8,32,64 × context 8,512,2048) compiles the static
# model once per case; split it over calls (--models, --batch) to stay inside a call's limit.
# Settings (environment): BUILD_DIR (build/cuda-release), BENCH_BIN, PYTHON (python3, needs
# torch + transformers), CUDA_COMPILER, PACK_RECORDS (1), MICROLLM_GIT_COMMIT / _DIRTY (no .git).
set -uo pipefail

OUT=${OUT:-./out}
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT" || exit 1

BUILD_DIR=${BUILD_DIR:-build/cuda-release}
BENCH_BIN=${BENCH_BIN:-$BUILD_DIR/bench/microllm_bench_generate}
PYTHON=${PYTHON:-python3}
PACK_RECORDS=${PACK_RECORDS:-1}
start=$(date +%s)
log() { echo "[gpu/generate_bench $(($(date +%s) - start)) s] $*"; }

if [ ! -d .git ] && [ -z "${MICROLLM_GIT_COMMIT:-}" ]; then
  log "warning: no .git and MICROLLM_GIT_COMMIT unset: records will say commit unknown, dirty"
fi

# ---- build (only the benchmark driver) -----------------------------------------------------
if [ ! -x "$BENCH_BIN" ]; then
  cache_home=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$BUILD_DIR/CMakeCache.txt" 2>/dev/null)
  if [ -n "$cache_home" ] && [ "$cache_home" != "$ROOT" ] && [ "$cache_home" != "$(pwd -P)" ]; then
    log "$BUILD_DIR was configured at $cache_home: building in $BUILD_DIR-here instead"
    BUILD_DIR=$BUILD_DIR-here
    BENCH_BIN=$BUILD_DIR/bench/microllm_bench_generate
  fi
  nvcc_path=${CUDA_COMPILER:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
  log "building microllm_bench_generate in $BUILD_DIR with $(nproc) jobs (log build-generate-bench.log)"
  {
    if [ ! -f "$BUILD_DIR/CMakeCache.txt" ]; then
      cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMICROLLM_WITH_CUDA=ON \
        -DCMAKE_CUDA_ARCHITECTURES=90a -DCMAKE_CUDA_COMPILER="$nvcc_path" || exit 1
    fi
    cmake --build "$BUILD_DIR" --target microllm_bench_generate -j "$(nproc)"
  } >"$OUT/build-generate-bench.log" 2>&1
  build_rc=$?
  if [ "$build_rc" -ne 0 ] || [ ! -x "$BENCH_BIN" ]; then
    tail -n 30 "$OUT/build-generate-bench.log"
    log "FAILED: could not build $BENCH_BIN (exit $build_rc)"
    exit 1
  fi
fi
log "benchmark driver: $BENCH_BIN"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw \
  --format=csv 2>/dev/null

# ---- run -----------------------------------------------------------------------------------
records="$OUT/records"
raw="$OUT/bench-raw"
mkdir -p "$records" "$raw"
PYTHONUNBUFFERED=1 "$PYTHON" bench/generate/run_generate_bench.py --bench "$BENCH_BIN" --python "$PYTHON" \
  --records-dir "$records" --raw-dir "$raw" --table-out "$raw/generate-table.txt" "$@" \
  2>&1 | tee "$OUT/generate-bench.log"
bench_rc=${PIPESTATUS[0]}
log "run_generate_bench.py exit $bench_rc"

# ---- pack and print ------------------------------------------------------------------------
table=""
[ -f "$raw/generate-table.txt" ] && table=$(cat "$raw/generate-table.txt")
if [ "$PACK_RECORDS" = "1" ]; then
  # Only this benchmark's records: other benchmarks of the same call may share $OUT/records,
  # and a second call of this script packs into its own archive.
  pack="$OUT/generate-$(date -u +%Y%m%dT%H%M%SZ).tar.gz"
  if tar -czf "$pack" -C "$OUT" records/generate bench-raw; then
    rm -rf "$records/generate" "$raw"
    log "records packed: $pack ($(tar -tzf "$pack" | grep -c '/generate/.*\.json$') records)"
  else
    log "packing failed: records left in $records"
  fi
fi
echo
echo "${table:-no table: see generate-bench.log}"
exit "$bench_rc"
