#!/bin/bash
# Warm follow-up at COMMIT: full CUDA suite, 3-step hashes with the fused Q/K/V heads off/on, memcheck of the new kernel, A/B rounds 3-4. Everything packed in one tar.
set -u
cd "$(dirname "$0")/.."
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
left() { [ $(( $(date +%s) - t0 )) -lt $1 ]; }
export LD_LIBRARY_PATH=/tmp/lib; d=$(dirname "$(find / -name 'libnccl.so.2' 2>/dev/null | head -1)"); export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$d
export MICROLLM_GIT_COMMIT=$(cat .gpu/rec/COMMIT) MICROLLM_GIT_DIRTY=0
P=/tmp/pk2; rm -rf $P; mkdir -p $P
T=/tmp/rec/microllm_cuda_tests M=/tmp/rec/microllm
timeout 150 $T > $P/tests-full.log 2>&1; echo "$(el) full CUDA suite rc=$?"; grep -E "^\[  (FAILED|PASSED|SKIPPED)|tests ran|Failure" $P/tests-full.log | head -8
CFG=tests/fixtures/configs/qwen2.5-0.5b/config.json
python3 -c "
import numpy as np, json, hashlib
ids = np.random.default_rng(0).integers(0, 151936, size=1_000_000, dtype=np.uint32); ids.tofile('/tmp/train.bin')
open('/tmp/train.bin.json','w').write(json.dumps({'format':'microllm-tokens-v1','dtype':'uint32','count':int(ids.size),'sha256':hashlib.sha256(ids.tobytes()).hexdigest(),'vocab_size':151936}))"
run3() { local name=$1; shift
  env "$@" $M train --config $CFG --data /tmp/train.bin --steps 3 --batch 8 --seq 1024 --lr 1e-4 --warmup 2 --seed 1 --device cuda --dtype bf16 --log-every 1 --out /tmp/run-$name > $P/train-$name.log 2>&1
  echo "$(el) $name rc=$? $(sha256sum /tmp/run-$name/model.safetensors | cut -c1-16)"; }
left 200 && run3 qkv-off MICROLLM_FUSED_QKV_HEADS=0
left 230 && run3 qkv-on MICROLLM_FUSED_QKV_HEADS=1
if command -v compute-sanitizer >/dev/null && left 250; then
  timeout 60 compute-sanitizer --tool memcheck $T --gtest_filter="CudaRopeQkvHeads.MatchesCpu:CudaRopeQkvHeads.SameBitsAsTheUnfusedForm" > $P/memcheck-qkv-heads.log 2>&1; echo "$(el) memcheck rc=$?"; tail -n 3 $P/memcheck-qkv-heads.log
fi
left 260 && { OUT=/tmp/ab2 ROUNDS=2 BASE_ENV="MICROLLM_FUSED_QKV_HEADS=0" NEW_ENV="MICROLLM_FUSED_QKV_HEADS=1" timeout 80 bash scripts/gpu/train_ab.sh $M $M > $P/ab-qkv-heads-2.log 2>&1; echo "$(el) ab2 rc=$?"; tail -n 5 $P/ab-qkv-heads-2.log; }
tar -C $P -czf $OUT/pack2.tar.gz .
echo "$(el) done"
