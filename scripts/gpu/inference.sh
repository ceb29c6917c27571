#!/usr/bin/env bash
# The inference evidence on the GPU machine (one H200), in named steps (STEPS):
#   cuda-tests   the whole CUDA suite (microllm_cuda_tests), one log;
#   sanitize     compute-sanitizer memcheck and racecheck on the inference kernels' tests
#                (KV write, paged attention, sampling, penalties, RNG, _out forms, capture);
#   sampling-hf  the sampling and penalty oracles against transformers' real processors
#                (tests/ops/sampling, tests/ops/penalties; needs microllm_sampling_runner);
#   fixtures     scripts/gpu/generate_fixtures.sh: transformers' greedy `generate` on small
#                random and trained models, compared with `microllm generate` (F32 exact,
#                BF16 along HF's own path);
#   lab          the decode GEMV lab (dev/cuda/build/gemv_bf16 all).
# Binaries come from BIN (a folder holding microllm, microllm_cuda_tests,
# microllm_sampling_runner; default build/cuda-release's). Logs go to $OUT/inference/;
# a summary prints last; exit 1 if any step failed.
#
#   OUT=/tmp/out BIN=.gpu/bin STEPS="cuda-tests fixtures" scripts/gpu/inference.sh
set -uo pipefail
OUT=${OUT:-./out}
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT" || exit 1
BIN=${BIN:-}
CUDA_TESTS=${BIN:+$BIN/microllm_cuda_tests}
CUDA_TESTS=${CUDA_TESTS:-build/cuda-release/tests/microllm_cuda_tests}
CLI=${BIN:+$BIN/microllm}
CLI=${CLI:-build/cuda-release/apps/microllm/microllm}
RUNNER=${BIN:+$BIN/microllm_sampling_runner}
RUNNER=${RUNNER:-build/cpu-release/tests/microllm_sampling_runner}
PYTHON=${PYTHON:-python3}
STEPS=${STEPS:-"cuda-tests sanitize sampling-hf fixtures lab"}
LOG_DIR=$OUT/inference STEP_TAG=gpu/inference TAIL_LINES=${TAIL_LINES:-12}
mkdir -p "$LOG_DIR"
source "$ROOT/scripts/gpu/steps.sh"
KERNELS='*PagedAttention*:*KvWrite*:*Sampling*:*Penalties*:*CounterRng*:*OutForms*:*Capture*:*EngineCuda*'

want cuda-tests && step cuda-tests timeout 300 "$CUDA_TESTS" --gtest_brief=1
if want sanitize; then
  step memcheck timeout 240 compute-sanitizer --tool memcheck --error-exitcode 1 \
    "$CUDA_TESTS" --gtest_brief=1 --gtest_filter="$KERNELS:-*Large*"
  step racecheck timeout 240 compute-sanitizer --tool racecheck --error-exitcode 1 \
    "$CUDA_TESTS" --gtest_brief=1 --gtest_filter="*PagedAttention*:*Sampling*:*Penalties*:-*Large*"
fi
want sampling-hf && step sampling-hf env MICROLLM_SAMPLING_RUNNER="$RUNNER" timeout 300 "$PYTHON" -m pytest \
  -q -rs -p no:cacheprovider tests/ops/sampling/test_sampling_oracle.py tests/ops/penalties/test_penalties_oracle.py
want fixtures && step fixtures env MICROLLM="$CLI" OUT="$OUT" STEPS="tokenizer fixtures compare" \
  FIXTURE_ARGS="${FIXTURE_ARGS:---heads 2 --kv-heads 1}" timeout 420 bash scripts/gpu/generate_fixtures.sh
want lab && step lab timeout 120 dev/cuda/build/gemv_bf16 all
print_summary
exit $failed
