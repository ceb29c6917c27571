#!/bin/bash
# Warm follow-up: compute-sanitizer over the fused norm backward and AdamW runs tests.
set -u
cd "$(dirname "$0")/.."
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
export LD_LIBRARY_PATH=/tmp/lib; d=$(dirname "$(find / -name 'libnccl.so.2' 2>/dev/null | head -1)"); export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$d
P=/tmp/pk19; rm -rf $P; mkdir -p $P; T=/tmp/rec/microllm_cuda_tests
CS=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1); echo "sanitizer: $CS"
[ -n "$CS" ] && { timeout 100 $CS --tool memcheck $T --gtest_filter="CudaRmsNorm.FusedBackwardGivesTheSeparateKernelsBits:CudaFusedAdamW.RunsOfFourGiveTheCpuBitsOnOffsetViews" > $P/memcheck.log 2>&1; echo "$(el) memcheck rc=$?"; tail -n 3 $P/memcheck.log
timeout 110 $CS --tool racecheck $T --gtest_filter="CudaRmsNorm.FusedBackwardGivesTheSeparateKernelsBits" > $P/racecheck.log 2>&1; echo "$(el) racecheck rc=$?"; tail -n 3 $P/racecheck.log; }
tar -C $P -czf $OUT/pack19.tar.gz .
echo "$(el) done"
