#!/usr/bin/env bash
# A/B of two `microllm` binaries' training step on the GPU machine, in one call: the
# 0.5B-shape step of scripts/gpu/train_bench.sh (B=8 T=1024, BF16, AdamW) runs the binaries
# alternately, ROUNDS times, microllm alone (no PyTorch peer: measurements for the
# optimization log, not records for the README), and a table of tokens/s, stage medians and
# peak memory per side prints last. The runs' records go to $OUT/ab/<side>-<round>/.
#
#   OUT=/tmp/out scripts/gpu/train_ab.sh .gpu/base/microllm .gpu/new/microllm
#   scripts/gpu/train_ab.sh BASE NEW --loss-chunk 2048   # more arguments: run_train_bench.py
#
# One binary under two settings of its switches: the same binary twice, with NEW_ENV (and
# BASE_ENV) holding NAME=VALUE words for that side's environment, e.g.
#   NEW_ENV="MICROLLM_FLASH_WGMMA=1" scripts/gpu/train_ab.sh BIN BIN
#
# Settings (environment): ROUNDS (3), STEPS (10), WARMUP (2), BATCH (8), SEQ (1024), CONFIG,
# PYTHON (python3; it needs numpy), BASE_ENV and NEW_ENV (empty).
set -uo pipefail
[ $# -ge 2 ] || { echo "usage: $0 BASE_MICROLLM NEW_MICROLLM [run_train_bench.py arguments]" >&2; exit 2; }
OUT=${OUT:-./out}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
ROUNDS=${ROUNDS:-3} PYTHON=${PYTHON:-python3} BASE_ENV=${BASE_ENV:-} NEW_ENV=${NEW_ENV:-}
CONFIG=${CONFIG:-$ROOT/tests/fixtures/configs/qwen2.5-0.5b/config.json}
base=$1 new=$2
shift 2
for bin in "$base" "$new"; do
  [ -x "$bin" ] || { echo "train_ab: $bin is not an executable" >&2; exit 2; }
done
mkdir -p "$OUT/ab"
for round in $(seq 1 "$ROUNDS"); do
  for side in base new; do
    bin=$base side_env=$BASE_ENV
    [ "$side" = new ] && bin=$new side_env=$NEW_ENV
    dir="$OUT/ab/$side-$round"
    mkdir -p "$dir"
    # shellcheck disable=SC2086  # side_env: NAME=VALUE words
    env $side_env "$PYTHON" "$ROOT/bench/train/run_train_bench.py" --microllm "$bin" --config "$CONFIG" \
      --batch "${BATCH:-8}" --seq "${SEQ:-1024}" --steps "${STEPS:-10}" --warmup "${WARMUP:-2}" \
      --no-peer --records-dir "$dir" "$@" > "$dir/run.log" 2>&1 ||
      echo "train_ab: $side round $round failed (see $dir/run.log)" >&2
  done
done
python3 "$ROOT/tools/profile/train_ab_table.py" "$OUT/ab"
