#!/usr/bin/env bash
# The chat template test (CTest `chat_template_parity`, label oracle): `microllm tokenizer
# render-chat` against the node oracle (@huggingface/jinja rendering the real templates with
# the variables transformers passes) on the generated conversations, byte for byte.
#
#   bash tests/tokenizer/run_chat_parity.sh --cli BIN --work DIR
#
# Steps: fetch the tokenizer configs (scripts/fetch_tokenizers.sh, cached); install the
# oracle with `npm ci` from tests/tokenizer/package-lock.json into the cache (once; its own
# folder, so it never races the tokenizer parity test); write the cases (make_chat_cases.py);
# per template, render them with chat_oracle.mjs and with the CLI (--requests-jsonl, family
# recognised from the template, never named) and compare. Cases whose js_differs names a
# known JS oracle deviation that applies to the template are skipped here (the HF script,
# tools/hf/compare_chat_templates.py, compares them). The cache is $MICROLLM_TOKENIZER_CACHE
# or build/.cache/tokenizers.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
cli="" work=""
while [ $# -gt 0 ]; do
  case "$1" in
    --cli) cli=$2; shift 2 ;;
    --work) work=$2; shift 2 ;;
    *) echo "run_chat_parity.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
[ -n "$cli" ] && [ -n "$work" ] || { echo "usage: run_chat_parity.sh --cli BIN --work DIR" >&2; exit 2; }
command -v node >/dev/null || { echo "run_chat_parity.sh: node is needed (bash scripts/setup.sh installs it)" >&2; exit 1; }
cache="${MICROLLM_TOKENIZER_CACHE:-$repo/build/.cache/tokenizers}"
fixtures="$repo/tests/fixtures/chat_templates"

bash "$repo/scripts/fetch_tokenizers.sh" "$cache" >/dev/null

modules="$cache/chat-oracle-node"
if ! cmp -s "$here/package-lock.json" "$modules/package-lock.json" || [ ! -d "$modules/node_modules/@huggingface/jinja" ]; then
  echo "run_chat_parity.sh: npm ci (oracle) into $modules"
  rm -rf "$modules"
  mkdir -p "$modules"
  cp "$here/package.json" "$here/package-lock.json" "$modules/"
  (cd "$modules" && npm ci --no-audit --no-fund --silent)
fi

mkdir -p "$work"
/usr/bin/python3 "$here/make_chat_cases.py" --out "$work/cases.jsonl"
# The ChatML template of the Hugging Face chat templating docs (no model ships it verbatim).
cat > "$work/chatml_config.json" <<'JSON'
{"chat_template": "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"}
JSON

# NAME CONFIG JS_DIFFERS_THAT_APPLY (comma-separated)
templates=(
  "chatml $work/chatml_config.json -"
  "qwen2_5 $cache/qwen2_5/tokenizer_config.json -"
  "qwen3 $cache/qwen3/tokenizer_config.json strip_newline"
  "llama3 $cache/llama3/tokenizer_config.json trim"
  "llama3_instruct $cache/llama3_1/tokenizer_config.json trim"
  "llama3_2 $fixtures/llama-3.2-instruct.json trim"
  "deepseek_v3 $cache/deepseek_v3/tokenizer_config.json -"
  "deepseek_r1_distill $fixtures/deepseek-r1-distill-qwen.json -"
)
status=0
for entry in "${templates[@]}"; do
  read -r name config skip <<< "$entry"
  node "$here/chat_oracle.mjs" --modules "$modules" --config "$config" --cases "$work/cases.jsonl" \
    --out "$work/$name.expected.jsonl"
  "$cli" tokenizer render-chat --tokenizer "$config" --requests-jsonl "$work/cases.jsonl" > "$work/$name.actual.jsonl"
  /usr/bin/python3 - "$name" "$skip" "$work/cases.jsonl" "$work/$name.expected.jsonl" "$work/$name.actual.jsonl" <<'PY' || status=1
import json, sys
name, skip, cases, expected, actual = sys.argv[1:]
skip = set() if skip == "-" else set(skip.split(","))
rows = [json.loads(l) for l in open(cases, encoding="utf-8")]
want = [json.loads(l) for l in open(expected, encoding="utf-8")]
got = [json.loads(l) for l in open(actual, encoding="utf-8")]
assert len(rows) == len(want) == len(got), (len(rows), len(want), len(got))
conversations, compared, skipped, bad = set(), 0, 0, []
for row, w, g in zip(rows, want, got):
    if skip & set(row.get("js_differs", [])):
        skipped += 1
        continue
    compared += 1
    conversations.add(row["id"].split("/")[0])
    if w != g:
        bad.append((row["id"], w, g))
for case_id, w, g in bad[:3]:
    print(f"MISMATCH {name} {case_id}\n  oracle:  {w!r}\n  microllm: {g!r}")
verdict = "equal" if not bad else f"{len(bad)} DIFFER"
print(f"CHAT {name}: {len(conversations)} conversations, {compared} cases compared, "
      f"{skipped} skipped (JS oracle differs from Python), {verdict}")
sys.exit(1 if bad else 0)
PY
done
exit $status
