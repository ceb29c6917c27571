#!/usr/bin/env bash
# The `microllm generate` fixtures on the GPU machine (one H200), in one call:
#   1. tokenizer: `microllm tokenizer train` learns a 1,024-id byte-level BPE with
#      <|endoftext|> on CORPUS (default: the repository's docs/*.md, concatenated);
#   2. fixtures: tools/hf/make_generate_fixtures.py builds qwen2 / llama / qwen3, random and
#      trained, with transformers' greedy outputs (F32 and BF16) → $OUT/fixtures/<name>/;
#   3. compare: tools/hf/compare_generate.py, `microllm generate` against them: F32 on cuda and
#      cpu (exact ids), BF16 on cuda (top-1 agreement along HF's BF16 path ≥ 0.95; the free-running prefix reported).
# Logs and comparison JSON go to $OUT/generate-fixtures/; with the fixtures they are packed
# into $OUT/generate-fixtures.tar.gz. A summary prints last; exit 1 if any step failed.
#
#   OUT=/tmp/out scripts/gpu/generate_fixtures.sh
#   # here, afterwards: tar -xzf generate-fixtures.tar.gz fixtures && cp -r fixtures/*-{random,trained} \
#   #   tests/fixtures/models/
#
# Settings (environment): MICROLLM (build/cuda-release/apps/microllm/microllm), PYTHON (python3
# with torch, transformers, tokenizers), CORPUS (a text file), TOKENIZER (an existing
# tokenizer.json: skips step 1), STEPS ("tokenizer fixtures compare"), FIXTURE_ARGS (more
# arguments for make_generate_fixtures.py, e.g. "--steps 600").
set -uo pipefail
OUT=${OUT:-./out}
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT" || exit 1
MICROLLM=${MICROLLM:-build/cuda-release/apps/microllm/microllm}
PYTHON=${PYTHON:-python3}
STEPS=${STEPS:-"tokenizer fixtures compare"}
G=$OUT/generate-fixtures
mkdir -p "$G"
LOG_DIR=$G STEP_TAG=gpu/generate_fixtures TAIL_LINES=20
source "$ROOT/scripts/gpu/steps.sh"

if [ -z "${CORPUS:-}" ]; then
  CORPUS=$G/corpus.txt
  cat docs/*.md >"$CORPUS"
fi
if [ -z "${TOKENIZER:-}" ]; then
  TOKENIZER=$G/tokenizer/tokenizer.json
  if want tokenizer; then
    step tokenizer "$MICROLLM" tokenizer train --vocab-size 1024 --special-tokens "<|endoftext|>" \
      --out "$G/tokenizer" --overwrite "$CORPUS"
  fi
fi
if want fixtures; then
  # shellcheck disable=SC2086  # FIXTURE_ARGS is a list of arguments
  step fixtures "$PYTHON" tools/hf/make_generate_fixtures.py --corpus "$CORPUS" --tokenizer "$TOKENIZER" \
    --out "$OUT" --overwrite ${FIXTURE_ARGS:-}
fi
if want compare; then
  step compare-f32-cuda "$PYTHON" tools/hf/compare_generate.py --cli "$MICROLLM" --device cuda --dtype f32 \
    "$OUT/fixtures" --out "$G/compare-f32-cuda.json"
  step compare-f32-cpu "$PYTHON" tools/hf/compare_generate.py --cli "$MICROLLM" --device cpu --dtype f32 \
    "$OUT/fixtures" --out "$G/compare-f32-cpu.json"
  step compare-bf16-cuda "$PYTHON" tools/hf/compare_generate.py --cli "$MICROLLM" --device cuda --dtype bf16 \
    "$OUT/fixtures" --out "$G/compare-bf16-cuda.json"
fi
du -sh "$OUT"/fixtures/* 2>/dev/null
tar -czf "$OUT/generate-fixtures.tar.gz" -C "$OUT" generate-fixtures $( [ -d "$OUT/fixtures" ] && echo fixtures )
print_summary
exit $failed
