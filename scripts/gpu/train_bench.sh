#!/usr/bin/env bash
# Training throughput on the GPU machine, microllm against PyTorch in one call
# (bench/train/run_train_bench.py): the Qwen2.5-0.5B shape, random initialization and random
# tokens, B=8 T=1024, BF16 compute with F32 master weights, AdamW. One record of kind "train"
# goes to $OUT/records/train/ (./out when OUT is unset); the summary line prints last.
#   MICROLLM=build/cuda-release/apps/microllm/microllm STEPS=10 scripts/gpu/train_bench.sh
#   scripts/gpu/train_bench.sh --loss-chunk 2048     # arguments pass to run_train_bench.py
set -uo pipefail
OUT=${OUT:-./out}
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)
cd "$(dirname "$0")/../.."
MICROLLM=${MICROLLM:-build/cuda-release/apps/microllm/microllm}
PYTHON=${PYTHON:-python3}
exec "$PYTHON" bench/train/run_train_bench.py --microllm "$MICROLLM" \
  --config tests/fixtures/configs/qwen2.5-0.5b/config.json --batch "${BATCH:-8}" --seq "${SEQ:-1024}" \
  --steps "${STEPS:-10}" --warmup "${WARMUP:-2}" --records-dir "$OUT/records" "$@"
