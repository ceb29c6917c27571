#!/bin/bash
# Warm follow-up: 3 training steps of the 0.5B shape with the fused norm backward and AdamW runs off and on: model hashes.
set -u
cd "$(dirname "$0")/.."
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
export LD_LIBRARY_PATH=/tmp/lib; d=$(dirname "$(find / -name 'libnccl.so.2' 2>/dev/null | head -1)"); export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$d
export MICROLLM_GIT_COMMIT=$(cat .gpu/rec/COMMIT) MICROLLM_GIT_DIRTY=0
P=/tmp/pk20; rm -rf $P; mkdir -p $P; M=/tmp/rec/microllm
CFG=tests/fixtures/configs/qwen2.5-0.5b/config.json
python3 -c "
import numpy as np, json, hashlib
ids = np.random.default_rng(0).integers(0, 151936, size=1_000_000, dtype=np.uint32); ids.tofile('/tmp/train.bin')
open('/tmp/train.bin.json','w').write(json.dumps({'format':'microllm-tokens-v1','dtype':'uint32','count':int(ids.size),'sha256':hashlib.sha256(ids.tobytes()).hexdigest(),'vocab_size':151936}))"
run3() { local name=$1; shift
  env "$@" timeout 80 $M train --config $CFG --data /tmp/train.bin --steps 3 --batch 8 --seq 1024 --lr 1e-4 --warmup 2 --seed 1 --device cuda --dtype bf16 --log-every 1 --out /tmp/run-$name > $P/train-$name.log 2>&1
  echo "$(el) $name rc=$? $(sha256sum /tmp/run-$name/model.safetensors | cut -c1-16)"; }
run3 off MICROLLM_FUSED_NORM_BACKWARD=0 MICROLLM_ADAMW_RUNS=0
run3 on MICROLLM_FUSED_NORM_BACKWARD=1 MICROLLM_ADAMW_RUNS=1
tar -C $P -czf $OUT/pack20.tar.gz .
echo "$(el) done"
