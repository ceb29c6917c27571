#!/usr/bin/env bash
# Alignment evidence on the GPU machine (one H200), in one call:
#   1. model alignment, microllm CUDA vs PyTorch CUDA (tools/alignment/run.py): the tiny model
#      (F32, the CI tolerances) and the Qwen2.5-0.5B shape reduced to ALIGN_LAYERS layers
#      (values captured up to ALIGN_CAPTURE elements each, so --partial);
#   2. operator alignment on CUDA (tools/alignment/operators/run_operators.py);
#   3. Hugging Face transformers against microllm (tools/hf/compare_hf.py): every fixture
#      config reduced to 2 layers plus the full Qwen2.5-0.5B, F32 and BF16: stage outputs,
#      logits, loss and every parameter gradient.
# Each step's report.md / comparison.json / JSON goes to $OUT/alignment/ and is packed into
# $OUT/alignment.tar.gz (the device returns at most 8 files). A summary prints last; the exit
# status is 1 if any step failed.
#
#   OUT=/tmp/out BIN=build/device/apps MICROLLM_GIT_COMMIT=... MICROLLM_GIT_DIRTY=0 scripts/gpu/alignment.sh
#
# Settings (environment): BIN (folder holding microllm_alignment), PYTHON (python3 with torch
# and transformers), STEPS ("model operators hf"), ALIGN_LAYERS (4), ALIGN_CAPTURE (65536),
# HF_FULL (qwen2.5-0.5b).
set -uo pipefail
OUT=${OUT:-./out}
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT" || exit 1
BIN=${BIN:-build/cuda-release/apps/microllm_alignment}
PYTHON=${PYTHON:-python3}
STEPS=${STEPS:-"model operators hf"}
ALIGN_LAYERS=${ALIGN_LAYERS:-4}
ALIGN_CAPTURE=${ALIGN_CAPTURE:-65536}
HF_FULL=${HF_FULL:-qwen2.5-0.5b}
A=$OUT/alignment
mkdir -p "$A"
LOG_DIR=$A STEP_TAG=gpu/alignment TAIL_LINES=25
source "$ROOT/scripts/gpu/steps.sh"
keep() {  # keep RUN_DIR NAME: the small files of an alignment run
  mkdir -p "$A/$2"
  cp "$1"/{report.md,comparison.json,manifest.json} "$A/$2/" 2>/dev/null
}

if want model; then
  step model-tiny-cuda "$PYTHON" tools/alignment/run.py --microllm-binary "$BIN/microllm_alignment" \
    --python "$PYTHON" --output /tmp/align-tiny --microllm-device cuda --pytorch-device cuda \
    --warmup 5 --repetitions 20 --atol 3e-5 --rtol 3e-5 --overwrite
  keep /tmp/align-tiny model-tiny-cuda
  step model-qwen2.5-0.5b-cuda "$PYTHON" tools/alignment/run.py --microllm-binary "$BIN/microllm_alignment" \
    --python "$PYTHON" --output /tmp/align-05b --microllm-device cuda --pytorch-device cuda \
    --config tests/fixtures/configs/qwen2.5-0.5b/config.json --layers "$ALIGN_LAYERS" --batch 1 --seq 128 \
    --max-captured-elements "$ALIGN_CAPTURE" --partial --warmup 3 --repetitions 10 \
    --atol 1e-4 --rtol 1e-4 --overwrite
  keep /tmp/align-05b model-qwen2.5-0.5b-cuda
fi
if want operators; then
  step operators-cuda "$PYTHON" tools/alignment/operators/run_operators.py \
    --microllm-binary "$BIN/microllm_alignment" --output /tmp/align-ops --device cuda --pytorch-device cuda --overwrite
  mkdir -p "$A/operators-cuda" && cp /tmp/align-ops/{report.md,summary.json} "$A/operators-cuda/" 2>/dev/null
fi
if want hf; then
  step hf-compare "$PYTHON" tools/hf/compare_hf.py --microllm-alignment "$BIN/microllm_alignment" \
    --device cuda --full $HF_FULL --out "$A/hf_compare.json"
fi
tar -czf "$OUT/alignment.tar.gz" -C "$OUT" alignment
print_summary
exit $failed
