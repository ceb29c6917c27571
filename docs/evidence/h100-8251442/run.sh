#!/bin/bash
# One call: CUDA suite (new), split-on tests, split A/B, base A/B, training A/B, memcheck.
set -u
cd "$(dirname "$0")/.."
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
left() { [ $(( $(date +%s) - t0 )) -lt $1 ]; }
tar -C /tmp -xJf .gpu/lib.tar.xz && export LD_LIBRARY_PATH=/tmp/lib:${LD_LIBRARY_PATH:-}
for d in bin new; do mkdir -p /tmp/$d; for f in .gpu/$d/*.xz; do n=$(basename $f .xz); xz -dc $f > /tmp/$d/$n; chmod +x /tmp/$d/$n; done; done
echo "bin $(cat .gpu/bin/COMMIT) new $(cat .gpu/new/COMMIT)"; nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu --format=csv,noheader
T=/tmp/new/microllm_cuda_tests
timeout 150 $T > $OUT/tests-full.log 2>&1; echo "$(el) full rc=$?"; grep -E "^\[  (FAILED|PASSED)|Failure" $OUT/tests-full.log | head -8
MICROLLM_GEMV_CLUSTER_SPLIT=1 timeout 100 $T --gtest_filter='CudaGemv.*:EngineCuda.*' > $OUT/tests-split-on.log 2>&1; echo "$(el) split-on rc=$?"; grep -E "^\[  (FAILED|PASSED)|Failure" $OUT/tests-split-on.log | head -8
MICROLLM_ROPE_RUNS=1 MICROLLM_JOIN_GATE_UP=1 timeout 100 $T --gtest_filter='CudaModel.*:CudaRope*:CudaActivation.*:CudaGemv.*:EngineCuda.*:CudaDeterminism.*:CudaFlatOptimizer.*' > $OUT/tests-rope-gateup-on.log 2>&1; echo "$(el) rope+gateup on rc=$?"; grep -E "^\[  (FAILED|PASSED)|Failure" $OUT/tests-rope-gateup-on.log | head -8
mkdir -p /tmp/ab1 /tmp/ab2 /tmp/tab
OUT=/tmp/ab1 ROUNDS=2 NEW_ENV="MICROLLM_GEMV_CLUSTER_SPLIT=1" bash scripts/gpu/decode_ab.sh /tmp/new/microllm_bench_generate /tmp/new/microllm_bench_generate qwen2.5-0.5b:8:512 deepseek-r1-distill-qwen-1.5b:8:512 2>&1 | tail -4
echo "$(el) split A/B done"
left 330 && { OUT=/tmp/tab ROUNDS=2 NEW_ENV="MICROLLM_ROPE_RUNS=1 MICROLLM_JOIN_GATE_UP=1" bash scripts/gpu/train_ab.sh /tmp/new/microllm /tmp/new/microllm 2>&1 | tail -8; echo "$(el) train A/B done"; }
left 400 && { OUT=/tmp/ab2 ROUNDS=2 bash scripts/gpu/decode_ab.sh /tmp/bin/microllm_bench_generate /tmp/new/microllm_bench_generate qwen2.5-0.5b:8:512 2>&1 | tail -3; echo "$(el) base A/B done"; }
left 440 && { MICROLLM_GEMV_CLUSTER_SPLIT=1 MICROLLM_ROPE_RUNS=1 timeout 60 compute-sanitizer --tool memcheck --error-exitcode 3 $T --gtest_filter='CudaGemv.*:CudaRope.*:CudaActivation.Swiglu*' > $OUT/memcheck.log 2>&1; echo "$(el) memcheck rc=$?"; tail -n 2 $OUT/memcheck.log; }
tar -C /tmp -czf $OUT/ab.tar.gz ab1 ab2 tab
echo "$(el) done"
