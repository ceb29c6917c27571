"""Derives tokenizer.json variants from the fetched real files, for components the three
real files lack (run by scripts/fetch_tokenizers.sh; /usr/bin/python3, stdlib only).

  llama3_bos  Llama 3 with the post-processor Meta's release ships: Sequence[ByteLevel,
              TemplateProcessing] that prepends <|begin_of_text|> (the npm copy has only
              ByteLevel).
  qwen3_gpt2  Qwen3's vocabulary with GPT-2's pre-tokenizer (plain ByteLevel, use_regex, here
              with add_prefix_space) and a TemplateProcessing that wraps the text in
              <|im_start|> ... <|im_end|> (a prefix and a suffix).

A variant is rewritten only when its content would change.
"""
import json
import pathlib
import shutil
import sys


def llama3_bos(t):
    bos = "<|begin_of_text|>"
    t["post_processor"] = {
        "type": "Sequence",
        "processors": [
            {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True},
            {
                "type": "TemplateProcessing",
                "single": [{"SpecialToken": {"id": bos, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
                "pair": [
                    {"SpecialToken": {"id": bos, "type_id": 0}},
                    {"Sequence": {"id": "A", "type_id": 0}},
                    {"SpecialToken": {"id": bos, "type_id": 1}},
                    {"Sequence": {"id": "B", "type_id": 1}},
                ],
                "special_tokens": {bos: {"id": bos, "ids": [128000], "tokens": [bos]}},
            },
        ],
    }
    return t


def qwen3_gpt2(t):
    t["pre_tokenizer"] = {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True}
    start, end = "<|im_start|>", "<|im_end|>"
    t["post_processor"] = {
        "type": "TemplateProcessing",
        "single": [
            {"SpecialToken": {"id": start, "type_id": 0}},
            {"Sequence": {"id": "A", "type_id": 0}},
            {"SpecialToken": {"id": end, "type_id": 0}},
        ],
        "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
        "special_tokens": {
            start: {"id": start, "ids": [151644], "tokens": [start]},
            end: {"id": end, "ids": [151645], "tokens": [end]},
        },
    }
    return t


VARIANTS = {"llama3_bos": ("llama3", llama3_bos), "qwen3_gpt2": ("qwen3", qwen3_gpt2)}


def main():
    cache = pathlib.Path(sys.argv[1])
    for name, (base, derive) in VARIANTS.items():
        source = cache / base
        text = json.dumps(derive(json.loads((source / "tokenizer.json").read_text("utf-8"))), ensure_ascii=False)
        out = cache / "variants" / name
        out.mkdir(parents=True, exist_ok=True)
        target = out / "tokenizer.json"
        if not target.exists() or target.read_text("utf-8") != text:
            target.write_text(text, "utf-8")
        shutil.copyfile(source / "tokenizer_config.json", out / "tokenizer_config.json")


if __name__ == "__main__":
    main()
