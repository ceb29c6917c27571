#!/usr/bin/env bash
# The decode switches that are off until measured (MICROLLM_GEMV_STAGE_W, MICROLLM_GEMV_STREAM_W,
# MICROLLM_PAGED_CHUNKS; docs/optimization-log.md), checked on the GPU machine in named steps
# (STEPS):
#   lab        dev/cuda/build/gemv_load_pattern: W streamed under the tensor-core GEMV's load
#              pattern, contiguous 512-byte loads and the CUDA-core GEMV's rows;
#   tests      the GEMV, paged attention, graph-capture and engine tests with each switch on;
#   sanitize   compute-sanitizer memcheck and racecheck over the GEMV and paged attention tests
#              with each switch on;
#   ab         scripts/gpu/decode_ab.sh, one binary with the switch off and on, Qwen2.5-0.5B
#              batch 8 context 512 (and batch 1 context 2,048 for paged attention), ROUNDS
#              rounds.
# Binaries come from BIN (a folder holding microllm_cuda_tests, microllm_bench_generate and
# gemv_load_pattern; default: build/cuda-release's and dev/cuda/build's). Logs go to
# $OUT/decode-switches/; a summary prints last; exit 1 if any step failed.
#
#   OUT=/tmp/out BIN=.gpu/bin STEPS="lab tests ab" scripts/gpu/decode_switches.sh
set -uo pipefail
OUT=${OUT:-./out}
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT" || exit 1
BIN=${BIN:-}
CUDA_TESTS=${BIN:+$BIN/microllm_cuda_tests}
CUDA_TESTS=${CUDA_TESTS:-build/cuda-release/tests/microllm_cuda_tests}
BENCH=${BIN:+$BIN/microllm_bench_generate}
BENCH=${BENCH:-build/cuda-release/bench/microllm_bench_generate}
LAB=${BIN:+$BIN/gemv_load_pattern}
LAB=${LAB:-dev/cuda/build/gemv_load_pattern}
ROUNDS=${ROUNDS:-2}
STEPS=${STEPS:-"lab tests sanitize ab"}
LOG_DIR=$OUT/decode-switches STEP_TAG=gpu/decode_switches TAIL_LINES=${TAIL_LINES:-8}
mkdir -p "$LOG_DIR"
source "$ROOT/scripts/gpu/steps.sh"
SWITCHES="MICROLLM_GEMV_STAGE_W MICROLLM_GEMV_STREAM_W MICROLLM_PAGED_CHUNKS"

want lab && step lab timeout 120 "$LAB"
for switch in $SWITCHES; do
  name=$(echo "${switch#MICROLLM_}" | tr 'A-Z_' 'a-z-')
  want tests && step "tests-$name" env "$switch=1" timeout 300 "$CUDA_TESTS" --gtest_brief=1 \
    --gtest_filter='CudaGemv.*:CudaPagedAttention.*:CudaGraphCapture.*:EngineCuda.*'
  if want sanitize; then
    step "memcheck-$name" env "$switch=1" timeout 300 compute-sanitizer --tool memcheck \
      --error-exitcode 1 "$CUDA_TESTS" --gtest_brief=1 --gtest_filter='CudaGemv.*:CudaPagedAttention.*'
    step "racecheck-$name" env "$switch=1" timeout 300 compute-sanitizer --tool racecheck \
      --error-exitcode 1 "$CUDA_TESTS" --gtest_brief=1 --gtest_filter='CudaGemv.*:CudaPagedAttention.*'
  fi
  cases=qwen2.5-0.5b:8:512
  [ "$switch" = MICROLLM_PAGED_CHUNKS ] && cases="$cases qwen2.5-0.5b:1:2048"
  # shellcheck disable=SC2086  # the cases are separate arguments
  want ab && step "ab-$name" env OUT="$OUT/decode-switches/ab-$name" ROUNDS="$ROUNDS" \
    NEW_ENV="$switch=1" timeout 300 bash scripts/gpu/decode_ab.sh "$BENCH" "$BENCH" $cases
done
print_summary
exit $failed
