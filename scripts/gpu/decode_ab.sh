#!/usr/bin/env bash
# A/B of two microllm_bench_generate binaries on the GPU machine, in one call: each case
# (model shape:batch:context) runs the binaries alternately, ROUNDS times, microllm alone
# (no PyTorch peer: these are measurements for the optimization log, not records), and a
# table of decode tokens/s per run and their medians is printed last. Raw JSON goes to
# $OUT/ab/ (./out when unset).
#
#   OUT=/tmp/out scripts/gpu/decode_ab.sh .gpu/base/microllm_bench_generate \
#     .gpu/new/microllm_bench_generate qwen2.5-0.5b:1:8 qwen2.5-0.5b:8:512
#
# One binary under two settings of its switches: the same binary twice, with NEW_ENV (and
# BASE_ENV) holding NAME=VALUE words for that side's environment, e.g.
#   NEW_ENV="MICROLLM_GEMV_CLUSTER_SPLIT=1" scripts/gpu/decode_ab.sh BIN BIN qwen2.5-0.5b:8:512
# (each document lists the MICROLLM_* switches it ran with under "switches").
#
# Settings (environment): ROUNDS (3), NEW_TOKENS (64), REPS (3), WARMUP (1), BASE_ENV and
# NEW_ENV (empty).
set -uo pipefail
[ $# -ge 3 ] || { echo "usage: $0 BASE_BIN NEW_BIN MODEL:BATCH:CONTEXT..." >&2; exit 2; }
OUT=${OUT:-./out}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
ROUNDS=${ROUNDS:-3} NEW_TOKENS=${NEW_TOKENS:-64} REPS=${REPS:-3} WARMUP=${WARMUP:-1}
BASE_ENV=${BASE_ENV:-} NEW_ENV=${NEW_ENV:-}
base=$1 new=$2
shift 2
mkdir -p "$OUT/ab"
for bin in "$base" "$new"; do
  [ -x "$bin" ] || { echo "decode_ab: $bin is not an executable" >&2; exit 2; }
done
for spec in "$@"; do
  IFS=: read -r model batch context <<< "$spec"
  for round in $(seq 1 "$ROUNDS"); do
    for side in base new; do
      bin=$base side_env=$BASE_ENV
      [ "$side" = new ] && bin=$new side_env=$NEW_ENV
      stem="$OUT/ab/$model-b$batch-c$context-$side-$round"
      # shellcheck disable=SC2086  # side_env: NAME=VALUE words
      env $side_env timeout 300 "$bin" --config "$ROOT/tests/fixtures/configs/$model/config.json" --dtype bf16 \
        --device cuda --batch "$batch" --context "$context" --new-tokens "$NEW_TOKENS" \
        --warmup "$WARMUP" --reps "$REPS" --out "$stem.json" > "$stem.log" 2>&1 ||
        echo "decode_ab: $spec $side round $round failed (see its .log)" >&2
    done
  done
done
python3 "$ROOT/tools/profile/decode_ab_table.py" "$OUT/ab"
