#!/usr/bin/env bash
# The whole test suite, as CI runs it:
#   0. the format gate: every C++/CUDA file clang-format clean (scripts/check_format.sh);
#   1. cpu-release: every C++ test and the PyTorch oracle suite;
#   2. cpu-sanitize: every C++ test under AddressSanitizer + UndefinedBehaviorSanitizer;
#   3. cuda-release, where nvcc exists: compiled, and its CUDA tests run (they skip with a
#      printed reason when no GPU is present).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh all
jobs=$(nproc)
start=$(date +%s)

step() { echo; echo "=== $* ($(( $(date +%s) - start )) s)"; }

step "format gate"
bash scripts/check_format.sh

step "cpu-release: build"
cmake --preset cpu-release -DMICROLLM_BUILD_TESTS=ON >/dev/null
cmake --build --preset cpu-release -j "$jobs"
step "cpu-release: C++ tests and PyTorch oracle"
ctest --preset cpu-release -j "$jobs" --no-tests=error

step "cpu-sanitize: build"
cmake --preset cpu-sanitize -DMICROLLM_BUILD_TESTS=ON >/dev/null
cmake --build --preset cpu-sanitize -j "$jobs"
step "cpu-sanitize: C++ tests under ASan + UBSan"
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 ctest --preset cpu-sanitize -L cpu -j "$jobs" --no-tests=error

nvcc_path=$(command -v nvcc || ls /usr/local/cuda/bin/nvcc 2>/dev/null || true)
if [ -n "$nvcc_path" ]; then
  step "cuda-release: build with $nvcc_path"
  cmake --preset cuda-release -DMICROLLM_BUILD_TESTS=ON -DCMAKE_CUDA_COMPILER="$nvcc_path" >/dev/null
  cmake --build --preset cuda-release -j "$jobs"
  make -C dev/cuda NVCC="$nvcc_path" -j "$jobs"  # the kernel lab builds too, so it cannot rot
  step "cuda-release: CUDA tests (skipped with a reason when there is no GPU)"
  ctest --preset cuda-release -L cuda -j 1 --no-tests=error
  # CTest lists skipped tests without their output; show the reason once.
  ./build/cuda-release/tests/microllm_cuda_tests --gtest_filter='CudaCopy.FillAndZerosOnDevice' |
    grep -E "skipped|OK|FAILED" || true
else
  step "cuda-release: skipped, no nvcc on this machine"
fi
step "all tests passed"
