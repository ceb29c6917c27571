#!/usr/bin/env bash
# Decode steps as the CUDA graph runs them, on the GPU machine: microllm_bench_generate per case
# (BF16, 64 new tokens) under the CUPTI kernel tracer (libmicrollm_kernel_trace.so through
# CUDA_INJECTION64_PATH), one CSV per case in $OUT/trace/, then
# tools/profile/kernel_trace_table.py prints each graph node's median duration and what it
# adds to the step. Unlike scripts/gpu/profile_decode.sh (Nsight Compute, serialized kernels,
# flushed caches), the kernels overlap as they do in the benchmark.
#
#   OUT=/tmp/out BENCH_BIN=build/cuda-release/bench/microllm_bench_generate \
#     TRACE_LIB=build/cuda-release/bench/libmicrollm_kernel_trace.so \
#     scripts/gpu/trace_decode.sh qwen2.5-0.5b:1:8 qwen2.5-0.5b:8:512
set -uo pipefail
OUT=${OUT:-./out}
BENCH_BIN=${BENCH_BIN:-build/cuda-release/bench/microllm_bench_generate}
TRACE_LIB=${TRACE_LIB:-build/cuda-release/bench/libmicrollm_kernel_trace.so}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
mkdir -p "$OUT/trace"
TRACE_LIB=$(cd "$(dirname "$TRACE_LIB")" && pwd)/$(basename "$TRACE_LIB")
# CUPTI ships with the CUDA toolkit, but not always on the loader's path (extras/CUPTI, or the
# copy in PyTorch's nvidia packages): find one when the library does not resolve it.
if ldd "$TRACE_LIB" 2>/dev/null | grep -q "libcupti.*not found"; then
  cupti=$(find /usr/local/cuda* /usr/lib /usr/local/lib /opt -name 'libcupti.so.1[0-9]*' 2>/dev/null | head -1)
  [ -n "$cupti" ] && export LD_LIBRARY_PATH=$(dirname "$cupti")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  echo "trace_decode: libcupti from ${cupti:-nowhere (the trace will be empty)}"
fi
[ $# -gt 0 ] || set -- qwen2.5-0.5b:1:8
for spec in "$@"; do
  IFS=: read -r model batch context <<< "$spec"
  name=$model-b$batch-c$context
  CUDA_INJECTION64_PATH=$TRACE_LIB MICROLLM_KERNEL_TRACE="$OUT/trace/$name.csv" timeout 300 \
    "$BENCH_BIN" --config "$ROOT/tests/fixtures/configs/$model/config.json" --dtype bf16 \
    --device cuda --batch "$batch" --context "$context" --new-tokens 64 --warmup 1 --reps 1 \
    --out "$OUT/trace/$name-bench.json" > "$OUT/trace/$name.log" 2>&1
  echo "trace_decode: $name rc=$? ($(tail -n 1 "$OUT/trace/$name.log"))"
  if [ -s "$OUT/trace/$name.csv" ]; then
    python3 "$ROOT/tools/profile/kernel_trace_table.py" "$OUT/trace/$name.csv" \
      > "$OUT/trace/$name.txt" && cat "$OUT/trace/$name.txt"
  else
    echo "trace_decode: no trace written for $name"
  fi
done
