#!/usr/bin/env bash
# Per-kernel GPU time of decode steps on the GPU machine: Nsight Compute over a short
# microllm_bench_generate run per case (BF16, 4 new tokens), one CSV per case in
# $OUT/ncu/, then tools/profile/ncu_step_summary.py prints the last step's kernels by name.
# ncu serializes kernels and flushes caches before each: durations are upper bounds.
#
#   OUT=/tmp/out BENCH_BIN=build/cuda-release/bench/microllm_bench_generate \
#     scripts/gpu/profile_decode.sh qwen2.5-0.5b:1:8 qwen2.5-0.5b:1:2048
set -uo pipefail
OUT=${OUT:-./out}
BENCH_BIN=${BENCH_BIN:-build/cuda-release/bench/microllm_bench_generate}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
mkdir -p "$OUT/ncu"
[ $# -gt 0 ] || set -- qwen2.5-0.5b:1:8
for spec in "$@"; do
  IFS=: read -r model batch context <<< "$spec"
  name=$model-b$batch-c$context
  timeout 300 ncu --clock-control none --metrics gpu__time_duration.sum --csv --print-units base \
    "$BENCH_BIN" --config "$ROOT/tests/fixtures/configs/$model/config.json" --dtype bf16 \
    --device cuda --batch "$batch" --context "$context" --new-tokens 4 --warmup 0 --reps 1 \
    --out "$OUT/ncu/$name-bench.json" > "$OUT/ncu/$name.csv" 2> "$OUT/ncu/$name.log"
  echo "profile_decode: $name rc=$?"
  python3 "$ROOT/tools/profile/ncu_step_summary.py" "$OUT/ncu/$name.csv"
done
