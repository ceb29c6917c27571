#!/usr/bin/env bash
# Per-kernel GPU time of a training step on the GPU machine: Nsight Compute over a short
# `microllm train` run (random tokens, BF16 compute with F32 masters, AdamW; 4 steps) of a
# config whose layer count is cut to LAYERS (every layer launches the same kernels, so the
# per-layer rows scale to the whole model), then tools/profile/ncu_step_summary.py --train
# prints one whole step's kernels by name. ncu serializes kernels and flushes caches before
# each: durations are upper bounds, and their sum is not the step time.
#
#   OUT=/tmp/out MICROLLM=build/cuda-release/apps/microllm/microllm LAYERS=4 \
#     scripts/gpu/profile_train.sh [extra microllm train arguments]
set -uo pipefail
OUT=${OUT:-./out}
MICROLLM=${MICROLLM:-build/cuda-release/apps/microllm/microllm}
CONFIG=${CONFIG:-tests/fixtures/configs/qwen2.5-0.5b/config.json}
LAYERS=${LAYERS:-4}
BATCH=${BATCH:-8}
SEQ=${SEQ:-1024}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
mkdir -p "$OUT/ncu"
work=$(mktemp -d)
python3 - "$ROOT" "$CONFIG" "$LAYERS" "$work" <<'PY'
import json, sys
from pathlib import Path
root, config, layers, work = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3]), Path(sys.argv[4])
sys.path.insert(0, str(Path(root) / "bench" / "train"))
from run_train_bench import token_file
c = json.loads(config.read_text())
c["num_hidden_layers"] = layers
(work / "config.json").write_text(json.dumps(c))
token_file(work / "tokens.bin", c["vocab_size"])
PY
name=$(basename "$(dirname "$CONFIG")")-l$LAYERS-b$BATCH-t$SEQ
timeout 400 ncu --clock-control none --metrics gpu__time_duration.sum --csv --print-units base \
  "$MICROLLM" train --config "$work/config.json" --data "$work/tokens.bin" --steps 4 \
  --batch "$BATCH" --seq "$SEQ" --lr 1e-4 --warmup 2 --device cuda --dtype bf16 --log-every 1 \
  --out "$work/run" "$@" > "$OUT/ncu/$name.csv" 2> "$OUT/ncu/$name.log"
echo "profile_train: $name rc=$?"
python3 "$ROOT/tools/profile/ncu_step_summary.py" --train "$OUT/ncu/$name.csv"
rm -rf "$work"
