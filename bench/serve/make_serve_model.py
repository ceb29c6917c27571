#!/usr/bin/env python3
"""A model folder for the serving benchmark: random weights of a config.json shape, saved by
transformers (`from_config`, BF16, `save_pretrained`), and a tokenizer.json that covers the
shape's whole vocabulary. No Qwen tokenizer travels with the tree, so the tokenizer is the
committed 1,024-id byte-level BPE fixture (tests/fixtures/models/qwen2-trained) with its
vocabulary filled up to `vocab_size` by plain entries "Ġfill<id>" (decoded as " fill<id>")
and its added token moved to the last id: every id a random-weight model samples has text,
and text prompts still tokenize with the fixture's merges.

  make_serve_model.py --config tests/fixtures/configs/qwen2.5-0.5b/config.json --out DIR
  make_serve_model.py --config ... --out DIR --tokenizer-only   # no transformers needed
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
FIXTURE = REPO_ROOT / "tests" / "fixtures" / "models" / "qwen2-trained"


def padded_tokenizer(vocab_size: int) -> dict:
    """The fixture's tokenizer.json with plain vocabulary entries up to `vocab_size` ids.
    HF gives an added token whose content is not in the vocabulary the next id after the
    model vocabulary (AddedVocabulary::add_tokens), so the fillers take the ids from the end
    of the fixture's vocabulary on and the added tokens the last ones."""
    doc = json.loads((FIXTURE / "tokenizer.json").read_text(encoding="utf-8"))
    vocab = doc["model"]["vocab"]
    added = doc["added_tokens"]
    if sorted(vocab.values()) != list(range(len(vocab))):
        raise SystemExit("make_serve_model: the fixture's vocabulary ids are not 0…n−1")
    fills = vocab_size - len(vocab) - len(added)
    if fills < 0:
        raise SystemExit(f"make_serve_model: vocab_size {vocab_size} is below the fixture's "
                         f"{len(vocab) + len(added)} ids")
    first = len(vocab)
    for i in range(first, first + fills):
        vocab[f"\u0120fill{i}"] = i
    for k, token in enumerate(added):
        token["id"] = first + fills + k
    return doc


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", required=True, help="a config.json of the model shape")
    p.add_argument("--out", required=True, help="the folder to write (must not exist)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--tokenizer-only", action="store_true", help="config.json and the tokenizer, no weights")
    args = p.parse_args(argv)
    out = Path(args.out)
    if out.exists():
        print(f"make_serve_model: {out} exists; refusing to overwrite it", file=sys.stderr)
        return 2
    config = json.loads(Path(args.config).read_text(encoding="utf-8"))
    if args.tokenizer_only:
        out.mkdir(parents=True)
        shutil.copy(args.config, out / "config.json")
    else:
        import torch
        import transformers
        torch.manual_seed(args.seed)
        cfg = transformers.AutoConfig.from_pretrained(args.config)
        device = "cuda" if torch.cuda.is_available() else "cpu"
        with torch.device(device):
            model = transformers.AutoModelForCausalLM.from_config(cfg, torch_dtype=torch.bfloat16)
        model.save_pretrained(out, safe_serialization=True)
    tokenizer = padded_tokenizer(int(config["vocab_size"]))
    (out / "tokenizer.json").write_text(json.dumps(tokenizer, ensure_ascii=False), encoding="utf-8")
    shutil.copy(FIXTURE / "tokenizer_config.json", out / "tokenizer_config.json")
    print(f"make_serve_model: wrote {out} (vocab {config['vocab_size']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
