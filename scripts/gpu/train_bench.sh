#!/usr/bin/env bash
# First training throughput on the GPU machine: `microllm train` on the Qwen2.5-0.5B shape
# (random initialization, random tokens), B=8 T=1024 BF16 mixed precision, logging every
# step; tokens/s of the steps after the first two are summarized last. Log in $OUT.
#   MICROLLM=build/cuda-release/apps/microllm/microllm STEPS=12 scripts/gpu/train_bench.sh
set -uo pipefail
OUT=${OUT:-./out}
mkdir -p "$OUT"
cd "$(dirname "$0")/../.."
MICROLLM=${MICROLLM:-build/cuda-release/apps/microllm/microllm}
STEPS=${STEPS:-12}
BATCH=${BATCH:-8}
SEQ=${SEQ:-1024}
data=$(mktemp -d)/train.bin
# Random ids below the vocabulary, with a microllm-tokens-v1 manifest.
python3 - "$data" <<'PY'
import hashlib, json, sys
import numpy as np
path = sys.argv[1]
ids = np.random.default_rng(0).integers(0, 151936, size=4_000_000, dtype=np.uint32)
ids.tofile(path)
json.dump({"format": "microllm-tokens-v1", "dtype": "uint32", "count": int(ids.size),
           "sha256": hashlib.sha256(ids.tobytes()).hexdigest(), "vocab_size": 151936},
          open(path + ".json", "w"))
PY
"$MICROLLM" train --config tests/fixtures/configs/qwen2.5-0.5b --data "$data" --steps "$STEPS" \
  --batch "$BATCH" --seq "$SEQ" --lr 1e-4 --warmup 2 --device cuda --dtype bf16 --log-every 1 \
  2>&1 | tee "$OUT/train_bench.log"
rc=${PIPESTATUS[0]}
nvidia-smi --query-gpu=name,memory.used --format=csv,noheader | tee -a "$OUT/train_bench.log"
# Median tokens/s over the steps after the first two (warm-up, allocator growth).
awk '$1 ~ /^[0-9]+$/ && $1 > 2 {print $5}' "$OUT/train_bench.log" | sort -n |
  awk -v b="$BATCH" -v s="$SEQ" '{v[NR]=$1} END {if (NR) printf "train_bench: median %.0f tokens/s over %d steps (B=%s T=%s bf16)\n", v[int((NR+1)/2)], NR, b, s}'
exit "$rc"
