#!/usr/bin/env bash
# Trains the default model with `microllm train` (docs/default-model.md), on the H200 in
# BF16 compute with F32 master weights; writes OUT/run/ (model.safetensors, config.json,
# checkpoint/), OUT/metrics.jsonl (every step's loss, every validation pass), OUT/train.log
# and OUT/command.txt (the exact command line).
#
#   tools/default_model/train.sh DATA OUT        # DATA: what prepare_data.sh wrote
# Settings (environment; the defaults are the committed model's): MICROLLM (binary),
# CONFIG, STEPS, LR, BATCH, SEQ, SEED, DEVICE, DTYPE.
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: $0 DATA OUT" >&2; exit 2; }
DATA=$1 OUT=$2
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
M=${MICROLLM:-$ROOT/build/cuda-release/apps/microllm/microllm}
CONFIG=${CONFIG:-$ROOT/tools/default_model/config.json}
STEPS=${STEPS:-1200} LR=${LR:-1e-3} BATCH=${BATCH:-32} SEQ=${SEQ:-256} SEED=${SEED:-1234}
DEVICE=${DEVICE:-cuda} DTYPE=${DTYPE:-bf16}
[ ! -e "$OUT/run" ] || { echo "train: $OUT/run exists; choose a new OUT" >&2; exit 1; }
mkdir -p "$OUT"
command=("$M" train --config "$CONFIG" --data "$DATA/train.bin" --val "$DATA/validation.bin"
  --steps "$STEPS" --batch "$BATCH" --seq "$SEQ" --lr "$LR" --warmup 100 --min-lr-ratio 0.1
  --optimizer adamw --weight-decay 0.1 --grad-clip 1.0 --seed "$SEED"
  --device "$DEVICE" --dtype "$DTYPE" --log-every 100 --eval-every 100 --eval-batches 16
  --metrics "$OUT/metrics.jsonl" --out "$OUT/run")
printf '%q ' "${command[@]}" >"$OUT/command.txt"
echo >>"$OUT/command.txt"
"${command[@]}" 2>&1 | tee "$OUT/train.log"
