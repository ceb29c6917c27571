#!/bin/bash
# Warm follow-up: fused norm backward + AdamW runs together against neither, 3 rounds; then each alone 1 round.
set -u
cd "$(dirname "$0")/.."
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
export LD_LIBRARY_PATH=/tmp/lib; d=$(dirname "$(find / -name 'libnccl.so.2' 2>/dev/null | head -1)"); export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$d
export MICROLLM_GIT_COMMIT=$(cat .gpu/rec/COMMIT) MICROLLM_GIT_DIRTY=0
P=/tmp/pk18; rm -rf $P; mkdir -p $P; M=/tmp/rec/microllm
OUT=/tmp/ab18 ROUNDS=3 BASE_ENV="MICROLLM_FUSED_NORM_BACKWARD=0 MICROLLM_ADAMW_RUNS=0" NEW_ENV="MICROLLM_FUSED_NORM_BACKWARD=1 MICROLLM_ADAMW_RUNS=1" timeout 200 bash scripts/gpu/train_ab.sh $M $M > $P/ab-norm-adamw.log 2>&1; echo "$(el) ab rc=$?"; tail -n 4 $P/ab-norm-adamw.log
tar -C $P -czf $OUT/pack18.tar.gz .
echo "$(el) done"
