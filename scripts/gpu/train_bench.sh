#!/usr/bin/env bash
# Training throughput on the GPU machine, microllm against PyTorch in one call
# (bench/train/run_train_bench.py): the Qwen2.5-0.5B shape, random initialization and random
# tokens, B=8 T=1024, BF16 compute with F32 master weights, AdamW. One record of kind "train"
# is written to $OUT/records/train/ (./out when OUT is unset) and packed, with the records of
# that folder, into $OUT/train-<UTC time>.tar.gz, which replaces them (PACK_RECORDS=0 leaves
# them loose: a device call returns only a few files); the summary line and the archive
# print last.
#   MICROLLM=build/cuda-release/apps/microllm/microllm STEPS=10 scripts/gpu/train_bench.sh
#   scripts/gpu/train_bench.sh --loss-chunk 2048     # arguments pass to run_train_bench.py
#   # here, afterwards: tar -xzf train-*.tar.gz -C bench/ records/train   (→ bench/records/train/)
set -uo pipefail
OUT=${OUT:-./out}
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)
cd "$(dirname "$0")/../.."
MICROLLM=${MICROLLM:-build/cuda-release/apps/microllm/microllm}
PYTHON=${PYTHON:-python3}
PACK_RECORDS=${PACK_RECORDS:-1}
"$PYTHON" bench/train/run_train_bench.py --microllm "$MICROLLM" \
  --config tests/fixtures/configs/qwen2.5-0.5b/config.json --batch "${BATCH:-8}" --seq "${SEQ:-1024}" \
  --steps "${STEPS:-10}" --warmup "${WARMUP:-2}" --records-dir "$OUT/records" "$@"
rc=$?
if [ "$PACK_RECORDS" = "1" ] && [ -d "$OUT/records/train" ]; then
  pack="$OUT/train-$(date -u +%Y%m%dT%H%M%SZ).tar.gz"
  if tar -czf "$pack" -C "$OUT" records/train; then
    rm -rf "$OUT/records/train"
    rmdir "$OUT/records" 2>/dev/null  # when no other benchmark left records there
    echo "train_bench: records packed: $pack"
  else
    echo "train_bench: packing failed: records left in $OUT/records/train"
  fi
fi
exit "$rc"
