#!/usr/bin/env bash
# Operator benchmarks on the GPU machine (one H200), microllm against PyTorch in one call:
# uses build/cuda-release/bench/microllm_bench_ops when it is there (a binary built here and
# carried with the tree runs unchanged), else builds that one target; then runs
# bench/ops/run_ops_bench.py, which writes one record per case (kind "ops"). Records go to
# $OUT/records/ops/ (./out when OUT is unset), the raw JSON of both programs and the table
# to $OUT/bench-raw/; since the device returns at most 8 files, both folders are packed into
# $OUT/records.tar.gz (PACK_RECORDS=0 leaves them loose). The table is
# printed last. Arguments pass to run_ops_bench.py (--filter, --warmup, --repetitions, ...).
#
#   OUT=/tmp/out MICROLLM_GIT_COMMIT=$(git rev-parse HEAD) MICROLLM_GIT_DIRTY=0 \
#     scripts/gpu/bench.sh --filter gemm,attention
#   # here, afterwards: tar -xzf records.tar.gz -C bench/ records   (→ bench/records/ops/)
#
# Settings (environment): BUILD_DIR (build/cuda-release), BENCH_BIN, PYTHON (python3, needs
# torch), CUDA_COMPILER, PACK_RECORDS (1), MICROLLM_GIT_COMMIT / MICROLLM_GIT_DIRTY (no .git).
set -uo pipefail

OUT=${OUT:-./out}
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT" || exit 1

BUILD_DIR=${BUILD_DIR:-build/cuda-release}
BENCH_BIN=${BENCH_BIN:-$BUILD_DIR/bench/microllm_bench_ops}
PYTHON=${PYTHON:-python3}
PACK_RECORDS=${PACK_RECORDS:-1}
start=$(date +%s)
log() { echo "[gpu/bench $(($(date +%s) - start)) s] $*"; }

if [ ! -d .git ] && [ -z "${MICROLLM_GIT_COMMIT:-}" ]; then
  log "warning: no .git and MICROLLM_GIT_COMMIT unset: records will say commit unknown, dirty"
fi

# ---- build (only the benchmark target) -----------------------------------------------------
if [ ! -x "$BENCH_BIN" ]; then
  cache_home=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$BUILD_DIR/CMakeCache.txt" 2>/dev/null)
  if [ -n "$cache_home" ] && [ "$cache_home" != "$ROOT" ] && [ "$cache_home" != "$(pwd -P)" ]; then
    log "$BUILD_DIR was configured at $cache_home: building in $BUILD_DIR-here instead"
    BUILD_DIR=$BUILD_DIR-here
    BENCH_BIN=$BUILD_DIR/bench/microllm_bench_ops
  fi
  nvcc_path=${CUDA_COMPILER:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
  log "building microllm_bench_ops in $BUILD_DIR with $(nproc) jobs (log build-bench.log)"
  {
    if [ ! -f "$BUILD_DIR/CMakeCache.txt" ]; then
      # The cuda-release preset's settings, for any build folder.
      cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMICROLLM_WITH_CUDA=ON \
        -DCMAKE_CUDA_ARCHITECTURES=90a -DCMAKE_CUDA_COMPILER="$nvcc_path" || exit 1
    fi
    cmake --build "$BUILD_DIR" --target microllm_bench_ops -j "$(nproc)"
  } >"$OUT/build-bench.log" 2>&1
  build_rc=$?
  if [ "$build_rc" -ne 0 ] || [ ! -x "$BENCH_BIN" ]; then
    tail -n 30 "$OUT/build-bench.log"
    log "FAILED: could not build $BENCH_BIN (exit $build_rc)"
    exit 1
  fi
fi
log "benchmark binary: $BENCH_BIN"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw \
  --format=csv 2>/dev/null

# ---- run -----------------------------------------------------------------------------------
records="$OUT/records"
raw="$OUT/bench-raw"  # both programs' JSON and the table, beside the records
mkdir -p "$records" "$raw"
PYTHONUNBUFFERED=1 "$PYTHON" bench/ops/run_ops_bench.py "$BENCH_BIN" --python "$PYTHON" \
  --records-dir "$records" --raw-dir "$raw" --table-out "$raw/table.txt" "$@" \
  2>&1 | tee "$OUT/bench.log"
bench_rc=${PIPESTATUS[0]}
log "run_ops_bench.py exit $bench_rc"

# ---- pack and print ------------------------------------------------------------------------
table=""
[ -f "$raw/table.txt" ] && table=$(cat "$raw/table.txt")
if [ "$PACK_RECORDS" = "1" ]; then
  if tar -czf "$OUT/records.tar.gz" -C "$OUT" records bench-raw; then
    rm -rf "$records" "$raw"
    log "records packed: $OUT/records.tar.gz ($(tar -tzf "$OUT/records.tar.gz" | grep -c '/ops/.*\.json$') records)"
  else
    log "packing failed: records left in $records"
  fi
fi
echo
echo "${table:-no table: see bench.log}"
exit "$bench_rc"
