#!/bin/bash
# One call at COMMIT (binaries in .gpu/rec): new tests, the fused Q/K/V heads A/B, the training record, the decode records.
set -u
cd "$(dirname "$0")/.."
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
left() { [ $(( $(date +%s) - t0 )) -lt $1 ]; }
tar -C /tmp -xJf .gpu/lib.tar.xz && export LD_LIBRARY_PATH=/tmp/lib:${LD_LIBRARY_PATH:-}
mkdir -p /tmp/rec; for f in .gpu/rec/*.xz; do n=$(basename $f .xz); xz -T8 -dc $f > /tmp/rec/$n; chmod +x /tmp/rec/$n; done
if ldd /tmp/rec/microllm | grep -q "not found"; then d=$(dirname "$(find / -name 'libnccl.so.2' 2>/dev/null | head -1)"); export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$d; fi
export MICROLLM_GIT_COMMIT=$(cat .gpu/rec/COMMIT) MICROLLM_GIT_DIRTY=0
echo "$(el) $MICROLLM_GIT_COMMIT $(nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu --format=csv,noheader)"
T=/tmp/rec/microllm_cuda_tests M=/tmp/rec/microllm
timeout 90 $T --gtest_filter="*MeasuredPlans*:*RopeQkvHeads*:CudaRope.*" > $OUT/tests-new.log 2>&1; echo "$(el) new tests rc=$?"; grep -E "^\[  (FAILED|PASSED)|Failure" $OUT/tests-new.log | head -12
OUT=/tmp/ab ROUNDS=2 BASE_ENV="MICROLLM_FUSED_QKV_HEADS=0" NEW_ENV="MICROLLM_FUSED_QKV_HEADS=1" timeout 150 bash scripts/gpu/train_ab.sh $M $M > $OUT/ab-qkv-heads.log 2>&1; echo "$(el) ab rc=$?"; tail -n 6 $OUT/ab-qkv-heads.log
MICROLLM=$M STEPS=10 OUT=/tmp/tr timeout 220 bash scripts/gpu/train_bench.sh > $OUT/train-bench.log 2>&1; echo "$(el) train record rc=$?"; tail -n 3 $OUT/train-bench.log
tar -C /tmp/tr -czf $OUT/train-records.tar.gz records 2>/dev/null; ls -la $OUT/train-records.tar.gz
for c in "qwen2.5-0.5b 8 512" "qwen2.5-0.5b 1 8" "deepseek-r1-distill-qwen-1.5b 1 8"; do set -- $c
  left 480 && { BENCH_BIN=/tmp/rec/microllm_bench_generate timeout $(( 585 - $(date +%s) + t0 )) bash scripts/gpu/generate_bench.sh --models $1 --batch $2 --context $3 > $OUT/generate-$1-b$2-c$3.log 2>&1; echo "$(el) generate $1 b$2 c$3 rc=$?"; tail -n 4 $OUT/generate-$1-b$2-c$3.log; }
done
ls $OUT
echo "$(el) done"
