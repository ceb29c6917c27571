#!/usr/bin/env bash
# The trained-tokenizer parity test (CTest `tokenizer_trained_parity`, label oracle): tokenizers
# written by `microllm tokenizer train` must encode the parity corpus exactly as the node
# oracle (@lenml/tokenizers, a JS port of HF tokenizers) encodes it from the same file.
#
#   bash tests/tokenizer/run_trained_parity.sh --parity BIN --cli BIN --work DIR
#
# Steps: install the oracle with `npm ci` into the cache (as run_parity.sh does; once); write
# the corpus (make_corpus.py); cut it into two training files (the English chunks, and every
# other string with the invalid-UTF-8 rows as raw bytes); for each configuration below train
# with the CLI, run oracle.mjs on the result and compare with microllm_tokenizer_parity
# --roundtrip (ids with and without special tokens, streaming decode, decode(encode(x)) ==
# normalize(x)). Needs node and npm (the registry only for the first install).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
parity="" cli="" work=""
while [ $# -gt 0 ]; do
  case "$1" in
    --parity) parity=$2; shift 2 ;;
    --cli) cli=$2; shift 2 ;;
    --work) work=$2; shift 2 ;;
    *) echo "run_trained_parity.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
[ -n "$parity" ] && [ -n "$cli" ] && [ -n "$work" ] || { echo "usage: run_trained_parity.sh --parity BIN --cli BIN --work DIR" >&2; exit 2; }
command -v node >/dev/null || { echo "run_trained_parity.sh: node is needed (bash scripts/setup.sh installs it)" >&2; exit 1; }
cache="${MICROLLM_TOKENIZER_CACHE:-$repo/build/.cache/tokenizers}"
start=$(date +%s)

modules="$cache/oracle-node"
mkdir -p "$cache"
(
  flock 9
  if ! cmp -s "$here/package-lock.json" "$modules/package-lock.json" || [ ! -d "$modules/node_modules/@lenml/tokenizers" ]; then
    echo "run_trained_parity.sh: npm ci (oracle) into $modules"
    rm -rf "$modules"
    mkdir -p "$modules"
    cp "$here/package.json" "$here/package-lock.json" "$modules/"
    (cd "$modules" && npm ci --no-audit --no-fund --silent)
  fi
) 9>"$cache/oracle-node.lock"

rm -rf "$work"
mkdir -p "$work"
/usr/bin/python3 "$here/make_corpus.py" --out "$work/corpus.jsonl"
/usr/bin/python3 - "$work/corpus.jsonl" "$work/english.txt" "$work/adversarial.txt" <<'PY'
import json, sys
corpus, english, adversarial = sys.argv[1:]
with open(corpus) as c, open(english, "wb") as e, open(adversarial, "wb") as a:
    for line in c:
        row = json.loads(line)
        if row["name"].startswith("english/"):
            e.write(row["text"].encode())
        else:
            a.write((bytes.fromhex(row["hex"]) if "hex" in row else row["text"].encode()) + b"\n")
PY

# name | vocabulary size | further flags. The custom pattern is DeepSeek V3's last Split
# (marks, punctuation and symbol classes); qwen2's vocabulary is larger than the corpus
# allows, so training stops early.
configs=(
  "gpt2|8000|--special-tokens <|endoftext|>,<|im_start|>,<|im_end|> --eos-token <|endoftext|>"
  "llama3|3000|--regex llama3 --normalizer nfc --special-tokens <|begin_of_text|>,<|eot_id|>,<|reserved_special_token_0|> --bos-token <|begin_of_text|>"
  "qwen2|60000|--regex qwen2 --min-frequency 2 --special-tokens <|endoftext|>,<think>,</think>"
  "custom|1000|--regex \\p{N}{1,3}|[^\\r\\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
)
status=0
for entry in "${configs[@]}"; do
  name=${entry%%|*}
  rest=${entry#*|}
  vocab=${rest%%|*}
  flags=${rest#*|}
  args=()
  # Split the flags on spaces, except inside the --regex value (the rest of the line).
  if [[ "$flags" == --regex\ * && "$name" == custom ]]; then
    args=(--regex "${flags#--regex }")
  else
    read -r -a args <<< "$flags"
  fi
  out="$work/$name"
  "$cli" tokenizer train --vocab-size "$vocab" --out "$out" "${args[@]}" \
    "$work/english.txt" "$work/adversarial.txt" > "$work/$name.train.txt" 2> "$work/$name.train.log" \
    || { echo "MISMATCH $name: microllm tokenizer train failed:"; cat "$work/$name.train.log"; status=1; continue; }
  echo "TRAINED $name: $(cat "$work/$name.train.txt")"
  node "$here/oracle.mjs" --modules "$modules" --tokenizer "$out" --corpus "$work/corpus.jsonl" --out "$work/$name.expected.jsonl"
  "$parity" --tokenizer "$out" --corpus "$work/corpus.jsonl" --expected "$work/$name.expected.jsonl" --name "trained-$name" --roundtrip || status=1
done
echo "run_trained_parity.sh: $(( $(date +%s) - start )) s"
exit $status
