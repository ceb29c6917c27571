#!/usr/bin/env bash
# Multi-GPU data parallel on a machine with N GPUs (docs/distributed.md):
#   1. the NCCL tests of microllm_cuda_tests (world size 1 through NCCL = plain trainer
#      bitwise; 2 GPUs vs 1 GPU with the global batch; overlap = no overlap; ZeRO-1 = plain)
#   2. equivalence through the command line, for W = 2, 4, 8 ranks (≤ N): `microllm launch
#      --nproc W -- microllm train --batch 2` against one `microllm train --batch 2W` on a tiny
#      F32 model (SGD); final parameters within 5e-5, --no-overlap bitwise equal to overlap,
#      --zero1 within 5e-5
#   3. scaling on the Qwen2.5-0.5B shape (random init, random tokens), B=8 T=1024 BF16 per
#      GPU, for 1, 2, 4, 8 GPUs (≤ N), with and without overlap; one record per run (kind
#      "scaling", samples = tokens/s of the steps after the first two, summed over the GPUs),
#      with scaling efficiency = median tokens/s(N) / (N · median tokens/s(1)).
# Logs, records (packed into $OUT/records.tar.gz) and a summary (printed last) go to $OUT.
#
#   OUT=/tmp/out MICROLLM_GIT_COMMIT=$(git rev-parse HEAD) MICROLLM_GIT_DIRTY=0 scripts/gpu/multi_gpu.sh
#   # here, afterwards: tar -xzf records.tar.gz -C bench/ records   (→ bench/records/scaling/)
#
# Settings (environment):
#   STEPS ("gtest equivalence scaling" by default; any subset of those words)
#   BUILD_DIR (build/cuda-release; configured with NCCL when it has no cache yet)
#   EQ_SIZES ("2 4 8"), SCALE_SIZES ("1 2 4 8"): world sizes, those above the GPU count dropped
#   TRAIN_STEPS (12) steps per scaling run; BATCH (8), SEQ (1024) per GPU
#   PORT (29600): MASTER_PORT base; each launch uses its own port
#   TIME_BUDGET (570 s): runs that would start after it are skipped and reported as such
#   PACK_RECORDS (1), MICROLLM_GIT_COMMIT / MICROLLM_GIT_DIRTY (provenance without .git)
set -uo pipefail

OUT=${OUT:-./out}
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT" || exit 1

STEPS=${STEPS:-"gtest equivalence scaling"}
BUILD_DIR=${BUILD_DIR:-build/cuda-release}
MICROLLM=$BUILD_DIR/apps/microllm/microllm
TEST_BIN=$BUILD_DIR/tests/microllm_cuda_tests
EQ_SIZES=${EQ_SIZES:-"2 4 8"}
SCALE_SIZES=${SCALE_SIZES:-"1 2 4 8"}
TRAIN_STEPS=${TRAIN_STEPS:-12}
BATCH=${BATCH:-8}
SEQ=${SEQ:-1024}
PORT=${PORT:-29600}
TIME_BUDGET=${TIME_BUDGET:-570}
PACK_RECORDS=${PACK_RECORDS:-1}
PYTHON=${PYTHON:-python3}
# NVLink multicast stays off on shared machines (NCCL inherits it through `microllm launch`).
export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0}
start=$(date +%s)
failed=0
summary=()

log() { echo "[gpu/multi_gpu $(($(date +%s) - start)) s] $*"; }
want() { case " $STEPS " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }
left() { echo $((TIME_BUDGET - ($(date +%s) - start) - 15)); }
note() { summary+=("$*"); log "$*"; }
next_port() { PORT=$((PORT + 1)); echo "$PORT"; }

ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
log "$ngpu GPU(s): $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1)"
if [ "$ngpu" -lt 1 ]; then
  log "FAILED: no GPU"
  exit 1
fi

# ---- build (NCCL on) -------------------------------------------------------------------------
if [ ! -x "$MICROLLM" ] || { want gtest && [ ! -x "$TEST_BIN" ]; }; then
  nvcc_path=${CUDA_COMPILER:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
  log "building microllm_cli and microllm_cuda_tests in $BUILD_DIR (log build.log)"
  {
    if [ ! -f "$BUILD_DIR/CMakeCache.txt" ]; then
      cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMICROLLM_WITH_CUDA=ON \
        -DMICROLLM_WITH_NCCL=ON -DCMAKE_CUDA_ARCHITECTURES=90a -DCMAKE_CUDA_COMPILER="$nvcc_path" || exit 1
    fi
    cmake --build "$BUILD_DIR" --target microllm_cli microllm_cuda_tests -j "$(nproc)"
  } >"$OUT/build.log" 2>&1 || { tail -n 30 "$OUT/build.log"; log "FAILED: build"; exit 1; }
fi
if ! ldd "$MICROLLM" 2>/dev/null | grep -q libnccl; then
  log "FAILED: $MICROLLM is not linked with NCCL (configure with -DMICROLLM_WITH_NCCL=ON)"
  exit 1
fi

# ---- 1. gtest --------------------------------------------------------------------------------
if want gtest; then
  timeout -k 10 "$(left)" "$TEST_BIN" --gtest_filter='NcclCommunicator.*' >"$OUT/gtest.log" 2>&1
  rc=$?
  passed=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' "$OUT/gtest.log" | tail -n 1)
  skipped=$(sed -n 's/^\[  SKIPPED \] \([0-9]*\) test.*/\1/p' "$OUT/gtest.log" | tail -n 1)
  [ "$rc" -ne 0 ] && failed=1
  note "gtest NcclCommunicator.*: exit $rc, ${passed:-0} passed, ${skipped:-0} skipped (gtest.log)"
fi

# ---- data ------------------------------------------------------------------------------------
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# write_tokens PATH VOCAB COUNT: random ids with a microllm-tokens-v1 manifest.
write_tokens() {
  "$PYTHON" - "$1" "$2" "$3" <<'PY'
import hashlib, json, sys
import numpy as np
path, vocab, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
ids = np.random.default_rng(0).integers(0, vocab, size=count, dtype=np.uint32)
ids.tofile(path)
json.dump({"format": "microllm-tokens-v1", "dtype": "uint32", "count": int(ids.size),
           "sha256": hashlib.sha256(ids.tobytes()).hexdigest(), "vocab_size": vocab},
          open(path + ".json", "w"))
PY
}
# compare A B TOL: max |a − b| over the tensors of two F32 model.safetensors ("bitwise" when TOL=0).
compare() {
  "$PYTHON" - "$1" "$2" "$3" <<'PY'
import json, struct, sys
import numpy as np
def load(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    body = raw[8 + n:]
    out = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        assert meta["dtype"] == "F32", (name, meta["dtype"])
        lo, hi = meta["data_offsets"]
        out[name] = np.frombuffer(body[lo:hi], dtype="<f4")
    return out
a, b, tol = load(sys.argv[1]), load(sys.argv[2]), float(sys.argv[3])
assert a.keys() == b.keys(), "different tensor names"
worst = max(float(np.max(np.abs(a[k].astype(np.float64) - b[k]))) for k in a)
same = all(a[k].tobytes() == b[k].tobytes() for k in a)
ok = same if tol == 0 else worst <= tol
print(f"max abs diff {worst:.3e}{' (bitwise equal)' if same else ''}: {'PASS' if ok else 'FAIL'}")
sys.exit(0 if ok else 1)
PY
}

# ---- 2. equivalence through the CLI ----------------------------------------------------------
if want equivalence; then
  cat >"$work/tiny.json" <<'JSON'
{"model_type": "qwen2", "vocab_size": 256, "hidden_size": 128, "intermediate_size": 256,
 "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
 "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "tie_word_embeddings": true}
JSON
  write_tokens "$work/tiny.bin" 256 200000
  common=(--config "$work/tiny.json" --data "$work/tiny.bin" --steps 6 --seq 64 --optimizer sgd --lr 0.5
          --warmup 1 --seed 3 --device cuda --dtype f32 --log-every 1)
  for w in $EQ_SIZES; do
    if [ "$w" -gt "$ngpu" ]; then note "equivalence W=$w: skipped ($ngpu GPUs)"; continue; fi
    if [ "$(left)" -lt 60 ]; then note "equivalence W=$w: skipped (TIME_BUDGET spent)"; failed=1; continue; fi
    eq="$work/eq$w"
    "$MICROLLM" train "${common[@]}" --batch $((2 * w)) --out "$eq/ref" >"$OUT/eq$w-ref.log" 2>&1 ||
      { note "equivalence W=$w: FAILED (single run, eq$w-ref.log)"; failed=1; continue; }
    for variant in overlap no-overlap zero1; do
      extra=()
      [ "$variant" = no-overlap ] && extra=(--no-overlap)
      [ "$variant" = zero1 ] && extra=(--zero1)
      timeout -k 10 300 "$MICROLLM" launch --nproc "$w" --master "127.0.0.1:$(next_port)" -- \
        microllm train "${common[@]}" --batch 2 --out "$eq/$variant" "${extra[@]}" >"$OUT/eq$w-$variant.log" 2>&1 ||
        { note "equivalence W=$w $variant: FAILED (launch exit $?, eq$w-$variant.log)"; failed=1; continue; }
    done
    for variant in overlap zero1; do
      [ -f "$eq/$variant/model.safetensors" ] || continue
      result=$(compare "$eq/ref/model.safetensors" "$eq/$variant/model.safetensors" 5e-5) || failed=1
      note "equivalence W=$w $variant vs 1 GPU × batch $((2 * w)): $result"
    done
    if [ -f "$eq/overlap/model.safetensors" ] && [ -f "$eq/no-overlap/model.safetensors" ]; then
      result=$(compare "$eq/overlap/model.safetensors" "$eq/no-overlap/model.safetensors" 0) || failed=1
      note "equivalence W=$w no-overlap vs overlap (bitwise expected): $result"
    fi
  done
fi

# ---- 3. scaling --------------------------------------------------------------------------------
if want scaling; then
  write_tokens "$work/qwen.bin" 151936 4000000
  config=tests/fixtures/configs/qwen2.5-0.5b
  train=(train --config "$config" --data "$work/qwen.bin" --steps "$TRAIN_STEPS" --batch "$BATCH" --seq "$SEQ"
         --lr 1e-4 --warmup 2 --device cuda --dtype bf16 --log-every 1)
  mkdir -p "$OUT/scaling"
  for n in $SCALE_SIZES; do
    if [ "$n" -gt "$ngpu" ]; then note "scaling N=$n: skipped ($ngpu GPUs)"; continue; fi
    modes="overlap no-overlap"
    [ "$n" = 1 ] && modes="single"
    for mode in $modes; do
      if [ "$(left)" -lt 60 ]; then note "scaling N=$n $mode: skipped (TIME_BUDGET spent)"; continue; fi
      logf="$OUT/scaling/n$n-$mode.log"
      if [ "$mode" = single ]; then
        timeout -k 10 "$(left)" "$MICROLLM" "${train[@]}" >"$logf" 2>&1
      else
        extra=()
        [ "$mode" = no-overlap ] && extra=(--no-overlap)
        timeout -k 10 "$(left)" "$MICROLLM" launch --nproc "$n" --master "127.0.0.1:$(next_port)" -- \
          microllm "${train[@]}" "${extra[@]}" >"$logf" 2>&1
      fi
      rc=$?
      # Rank 0's step lines: step loss lr grad-norm tokens/s; the first two steps are warm-up.
      awk '$1 ~ /^[0-9]+$/ && NF == 5 && $1 > 2 {print $5}' "$logf" >"$OUT/scaling/n$n-$mode.samples"
      count=$(wc -l <"$OUT/scaling/n$n-$mode.samples")
      [ "$rc" -ne 0 ] && failed=1
      note "scaling N=$n $mode: exit $rc, $count step samples ($logf)"
    done
  done
  # One record per run; efficiency against the single-GPU run's median.
  records="$OUT/records"
  mkdir -p "$records"
  "$PYTHON" - "$OUT/scaling" "$records" "$config" "$BATCH" "$SEQ" "$TRAIN_STEPS" <<'PY' || failed=1
import json, statistics, sys
from pathlib import Path
sys.path.insert(0, "tools/records")
import record
folder, records_dir, config, batch, seq, steps = sys.argv[1:7]
runs = {}
for f in sorted(Path(folder).glob("n*-*.samples")):
    n, mode = f.stem.split("-", 1)
    values = [float(v) for v in f.read_text().split()]
    if values:
        runs[(int(n[1:]), mode)] = (values, f.with_suffix(".log"))
base = runs.get((1, "single"))
base_median = statistics.median(base[0]) if base else None
for (n, mode), (values, logf) in sorted(runs.items()):
    median = statistics.median(values)
    efficiency = median / (n * base_median) if base_median else None
    stages = [l.strip() for l in logf.read_text().splitlines() if l.strip().startswith("rank ")]
    cfg = {"model": "qwen2.5-0.5b", "config": config, "gpus": n, "batch_per_gpu": int(batch), "seq": int(seq),
           "dtype": "bf16", "optimizer": "adamw", "overlap": None if mode == "single" else mode == "overlap",
           "zero1": False,
           "bucket_mb": 25, "steps": int(steps), "warmup_steps_dropped": 2,
           "samples": "tokens/s per step over all GPUs (rank 0's wall time)"}
    extra = {"scaling_efficiency": {
                 "definition": "median tokens/s(N) / (N * median tokens/s(1)), 1 = the single-GPU run",
                 "value": efficiency},
             "stage_ms_per_rank": stages}
    rec = record.make_record("scaling", cfg, values, "tokens/s",
                             command=["scripts/gpu/multi_gpu.sh", f"N={n}", mode], extra=extra)
    path = record.write_record(rec, f"qwen2.5-0.5b-{n}gpu-{mode}", records_dir)
    eff = f"{efficiency:.3f}" if efficiency is not None else "n/a"
    print(f"scaling N={n} {mode}: median {median:,.0f} tokens/s, efficiency {eff} -> {path}")
PY
fi

# ---- pack and summarize ----------------------------------------------------------------------
if [ -d "$OUT/records" ] && [ "$PACK_RECORDS" = "1" ]; then
  tar -czf "$OUT/records.tar.gz" -C "$OUT" records && rm -rf "$OUT/records" &&
    log "records packed: $OUT/records.tar.gz"
fi
echo
echo "## multi_gpu summary ($ngpu GPUs, $(($(date +%s) - start)) s)"
for line in "${summary[@]}"; do echo "- $line"; done
[ "$failed" -eq 0 ] && echo "result: PASS" || echo "result: FAIL"
exit "$failed"
