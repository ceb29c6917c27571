#!/usr/bin/env bash
# The choice of the default model's size and schedule: runs of train.sh side by side on one
# GPU (the models are small enough to share it), each with its validation curve in
# OUT/NAME/metrics.jsonl. Two runs ("final-a", "final-b") use train.sh's defaults, the
# committed model's command, so that their identities can be compared.
#
#   tools/default_model/sweep.sh DATA OUT
# SWEEP_RUNS="final-a final-b" runs only those. Runs: NAME = CONFIG STEPS LR (config "6x256" is config.json; "8x384" is the same with
# 8 layers, hidden 384, 6 heads, FFN 1024).
set -uo pipefail
[ $# -eq 2 ] || { echo "usage: $0 DATA OUT" >&2; exit 2; }
DATA=$1 OUT=$2
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
mkdir -p "$OUT"
python3 - "$HERE/config.json" "$OUT/config-8x384.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c.update(num_hidden_layers=8, max_window_layers=8, hidden_size=384, num_attention_heads=6,
         intermediate_size=1024)
json.dump(c, open(sys.argv[2], "w"), indent=2)
PY
runs=(
  "final-a 6x256 1200 1e-3"
  "final-b 6x256 1200 1e-3"
  "lr2e-3 6x256 1200 2e-3"
  "long 6x256 2400 2e-3"
  "short 6x256 600 2e-3"
  "wide 8x384 1200 1.5e-3"
)
pids=()
if [ -n "${SWEEP_RUNS:-}" ]; then
  chosen=()
  for r in "${runs[@]}"; do
    [[ " $SWEEP_RUNS " == *" ${r%% *} "* ]] && chosen+=("$r")
  done
  runs=("${chosen[@]}")
fi
for r in "${runs[@]}"; do
  read -r name config steps lr <<<"$r"
  cfg=$HERE/config.json
  [ "$config" = 8x384 ] && cfg=$OUT/config-8x384.json
  if [ "$name" = final-a ] || [ "$name" = final-b ]; then  # exactly train.sh's defaults
    bash "$HERE/train.sh" "$DATA" "$OUT/$name" >/dev/null 2>&1 &
  else
    CONFIG=$cfg STEPS=$steps LR=$lr bash "$HERE/train.sh" "$DATA" "$OUT/$name" >/dev/null 2>&1 &
  fi
  pids+=($!)
done
status=0
for p in "${pids[@]}"; do wait "$p" || status=1; done
for r in "${runs[@]}"; do
  read -r name _ <<<"$r"
  echo "$name: $(grep -E '^final val loss' "$OUT/$name/train.log" || echo 'no final line')"
done
exit $status
