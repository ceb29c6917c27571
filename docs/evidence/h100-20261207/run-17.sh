#!/bin/bash
# One call at COMMIT: tests of the three switched forms, their training A/Bs, the attention benchmark off/on, the AdamW lab.
set -u
cd "$(dirname "$0")/.."
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
left() { [ $(( $(date +%s) - t0 )) -lt $1 ]; }
tar -C /tmp -xJf .gpu/lib.tar.xz && export LD_LIBRARY_PATH=/tmp/lib:${LD_LIBRARY_PATH:-}
mkdir -p /tmp/rec; for f in .gpu/rec/*.xz; do n=$(basename $f .xz); xz -T8 -dc $f > /tmp/rec/$n; chmod +x /tmp/rec/$n; done
if ldd /tmp/rec/microllm | grep -q "not found"; then d=$(dirname "$(find / -name 'libnccl.so.2' 2>/dev/null | head -1)"); export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$d; fi
export MICROLLM_GIT_COMMIT=$(cat .gpu/rec/COMMIT) MICROLLM_GIT_DIRTY=0
P=/tmp/pk; rm -rf $P; mkdir -p $P
echo "$(el) $MICROLLM_GIT_COMMIT $(nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu --format=csv,noheader)" | tee $P/device.txt
T=/tmp/rec/microllm_cuda_tests M=/tmp/rec/microllm
tst() { local name=$1 filter=$2; shift 2; env "$@" timeout 100 $T --gtest_filter="$filter" > $P/tests-$name.log 2>&1; echo "$(el) tests $name rc=$?"; grep -E "^\[  (FAILED|PASSED)|Failure" $P/tests-$name.log | head -6; }
tst new "CudaRmsNorm*:CudaAddRmsNorm*:CudaFusedAdamW.*:CudaFlashAttention.*"
tst fused-norm-rerun "CudaModel.*:CudaRmsNorm*:CudaAddRmsNorm*:CudaDeterminism.*:CudaFlatOptimizer.*" MICROLLM_FUSED_NORM_BACKWARD=1
tst adamw-runs-rerun "CudaFusedAdamW.*:CudaFlatOptimizer.*:CudaDeterminism.*" MICROLLM_ADAMW_RUNS=1
tst flash-pipeline-rerun "CudaFlashAttention.*:CudaAttention*:CudaFlatOptimizer.*:CudaDeterminism.*" MICROLLM_FLASH_PIPELINE=1
ab() { local name=$1 var=$2; left $3 && { OUT=/tmp/ab-$name ROUNDS=2 BASE_ENV="$var=0" NEW_ENV="$var=1" timeout 90 bash scripts/gpu/train_ab.sh $M $M > $P/ab-$name.log 2>&1; echo "$(el) ab $name rc=$?"; tail -n 4 $P/ab-$name.log; }; }
ab flash-pipeline MICROLLM_FLASH_PIPELINE 250
for x in 0 1; do left 340 && { MICROLLM_FLASH_PIPELINE=$x OUT=/tmp/att$x BENCH_BIN=/tmp/rec/microllm_bench_ops timeout 80 bash scripts/gpu/bench.sh --filter attention > $P/attention-pipeline$x.log 2>&1; echo "$(el) attention pipeline=$x rc=$?"; tail -n 6 $P/attention-pipeline$x.log; cp /tmp/att$x/records.tar.gz $P/attention-records-$x.tar.gz 2>/dev/null; }; done
ab adamw-runs MICROLLM_ADAMW_RUNS 360
ab fused-norm MICROLLM_FUSED_NORM_BACKWARD 400
left 470 && { timeout 25 /tmp/rec/adamw_lab all > $P/adamw-lab.log 2>&1; echo "$(el) adamw lab rc=$?"; tail -n 5 $P/adamw-lab.log; }
tar -C $P -czf $OUT/pack17.tar.gz .
echo "$(el) done"
