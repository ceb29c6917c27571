#!/usr/bin/env bash
# Tokenizer evidence against Hugging Face on the GPU machine's CPU (tokenizers, transformers):
#   1. parity: tests/tokenizer/hf_oracle.py writes HF's ids for the corpus, and
#      microllm_tokenizer_parity --strict compares every line, for qwen3, llama3 and deepseek_v3;
#   2. chat templates: tools/hf/compare_chat_templates.py, apply_chat_template against
#      `microllm tokenizer render-chat` for the real templates and the committed fixtures;
#   3. trained tokenizers: tools/hf/check_trained_tokenizer.py --hf-trainer (HF loads what
#      `microllm tokenizer train` writes and encodes the corpus to the same ids);
#   4. encode throughput: bench/tokenizer/run_tokenizer_bench.py, one record per tokenizer
#      (kind "tokenizer") in $OUT/records/tokenizer/.
# Logs go to $OUT/tokenizer/, packed with the records into $OUT/tokenizer.tar.gz; a summary
# prints last; exit 1 if any step failed.
#
#   OUT=/tmp/out BIN=build/device/bin TOK=build/device/tok CORPUS=corpus.jsonl TEXT=bench.txt \
#     MICROLLM_GIT_COMMIT=... MICROLLM_GIT_DIRTY=0 scripts/gpu/tokenizer.sh
#
# Settings (environment): BIN (folder with microllm, microllm_tokenizer_parity and
# microllm_bench_tokenizer), TOK (folder of tokenizer folders: qwen3, llama3, deepseek_v3,
# qwen2_5, llama3_1), CORPUS (make_corpus.py's JSONL), TEXT (the benchmark's text, from
# run_tokenizer_bench.py --save-text), PYTHON, STEPS ("parity chat trained bench").
set -uo pipefail
OUT=${OUT:-./out}
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT" || exit 1
BIN=${BIN:-build/cuda-release}
TOK=${TOK:-build/.cache/tokenizers}
PYTHON=${PYTHON:-python3}
STEPS=${STEPS:-"parity chat trained bench"}
L=$OUT/tokenizer
mkdir -p "$L"
LOG_DIR=$L STEP_TAG=gpu/tokenizer TAIL_LINES=12
source "$ROOT/scripts/gpu/steps.sh"
tool() { for d in "$BIN" "$BIN/apps/microllm" "$BIN/tests" "$BIN/bench"; do [ -x "$d/$1" ] && { echo "$d/$1"; return; }; done; echo "$BIN/$1"; }
CLI=$(tool microllm)

if want parity; then
  for name in qwen3 llama3 deepseek_v3; do
    step "parity-$name" bash -c "'$PYTHON' tests/tokenizer/hf_oracle.py --tokenizer '$TOK/$name' --corpus '$CORPUS' \
      --out '$L/hf-$name.jsonl' && '$(tool microllm_tokenizer_parity)' --tokenizer '$TOK/$name' --corpus '$CORPUS' \
      --expected '$L/hf-$name.jsonl' --name $name --strict"
    rm -f "$L/hf-$name.jsonl"
  done
fi
if want chat; then
  step chat-templates "$PYTHON" tools/hf/compare_chat_templates.py --cli "$CLI" \
    --tokenizer qwen2_5="$TOK/qwen2_5" --tokenizer qwen3="$TOK/qwen3" --tokenizer llama3="$TOK/llama3" \
    --tokenizer llama3_1="$TOK/llama3_1" --tokenizer deepseek_v3="$TOK/deepseek_v3" \
    --template llama3_2=tests/fixtures/chat_templates/llama-3.2-instruct.json@"$TOK/llama3_1" \
    --template deepseek_r1_distill=tests/fixtures/chat_templates/deepseek-r1-distill-qwen.json@"$TOK/deepseek_v3"
fi
if want trained; then
  step trained-gpt2 "$PYTHON" tools/hf/check_trained_tokenizer.py --cli "$CLI" --work /tmp/trained-gpt2 \
    --corpus "$CORPUS" --vocab-size 8000 --special-tokens "<|endoftext|>,<|im_start|>,<|im_end|>" --hf-trainer
  step trained-qwen2-nfc "$PYTHON" tools/hf/check_trained_tokenizer.py --cli "$CLI" --work /tmp/trained-qwen2 \
    --corpus "$CORPUS" --vocab-size 16000 --regex qwen2 --normalizer nfc
fi
if want bench; then
  step bench "$PYTHON" bench/tokenizer/run_tokenizer_bench.py "$(tool microllm_bench_tokenizer)" \
    --tokenizer qwen3="$TOK/qwen3" --tokenizer llama3="$TOK/llama3" --tokenizer deepseek_v3="$TOK/deepseek_v3" \
    --text "$TEXT" --records-dir "$OUT/records"
fi
tar -czf "$OUT/tokenizer.tar.gz" -C "$OUT" tokenizer $( [ -d "$OUT/records" ] && echo records )
print_summary
exit $failed
