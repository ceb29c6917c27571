#!/bin/bash
# Warm: measured GEMM plans off/on at the 0.5B and 1.5B shapes (H200), one round each.
set -u
cd "$(dirname "$0")/.."
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
export LD_LIBRARY_PATH=/tmp/lib; d=$(dirname "$(find / -name 'libnccl.so.2' 2>/dev/null | head -1)"); export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$d
export MICROLLM_GIT_COMMIT=$(cat .gpu/rec/COMMIT) MICROLLM_GIT_DIRTY=0
P=/tmp/pk3; rm -rf $P; mkdir -p $P; M=/tmp/rec/microllm
OUT=/tmp/ab3 ROUNDS=2 BASE_ENV="MICROLLM_GEMM_MEASURE=0" NEW_ENV="X=1" timeout 110 bash scripts/gpu/train_ab.sh $M $M > $P/ab-measure-0.5b.log 2>&1; echo "$(el) 0.5b rc=$?"; tail -n 5 $P/ab-measure-0.5b.log
CONFIG=$PWD/tests/fixtures/configs/deepseek-r1-distill-qwen-1.5b/config.json OUT=/tmp/ab4 ROUNDS=1 BASE_ENV="MICROLLM_GEMM_MEASURE=0" NEW_ENV="X=1" timeout 150 bash scripts/gpu/train_ab.sh $M $M > $P/ab-measure-1.5b.log 2>&1; echo "$(el) 1.5b rc=$?"; tail -n 5 $P/ab-measure-1.5b.log
tar -C $P -czf $OUT/pack3.tar.gz .
echo "$(el) done"
