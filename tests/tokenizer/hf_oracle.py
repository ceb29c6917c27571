"""The authoritative oracle: Hugging Face `tokenizers` itself (for the H200 machine's Python,
where `pip install tokenizers` works; CI uses the node oracle, oracle.mjs).

    python3 tests/tokenizer/hf_oracle.py --tokenizer DIR --corpus corpus.jsonl --out expected.jsonl
    microllm_tokenizer_parity --tokenizer DIR --corpus corpus.jsonl --expected expected.jsonl --strict

Same output as oracle.mjs: one {"plain": ids, "special": ids} line per corpus line, from
Tokenizer.from_file(DIR/tokenizer.json).encode(text, add_special_tokens=False / True).
--strict makes the parity binary compare the "js_differs" lines too.
"""
import argparse
import json
import pathlib

from tokenizers import Tokenizer


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokenizer", required=True)
    parser.add_argument("--corpus", required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    tok = Tokenizer.from_file(str(pathlib.Path(args.tokenizer) / "tokenizer.json"))
    with open(args.corpus, encoding="utf-8") as corpus, open(args.out, "w", encoding="utf-8") as out:
        for line in corpus:
            if not line.strip():
                continue
            text = json.loads(line)["text"]
            plain = tok.encode(text, add_special_tokens=False).ids
            special = tok.encode(text, add_special_tokens=True).ids
            out.write(json.dumps({"plain": plain, "special": special}) + "\n")


if __name__ == "__main__":
    main()
