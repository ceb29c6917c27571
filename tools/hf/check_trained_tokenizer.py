"""Checks `microllm tokenizer train` against Hugging Face `tokenizers` itself: trains with the
microllm CLI, loads the written tokenizer.json with `tokenizers.Tokenizer.from_file`, and
compares the ids of every corpus string with microllm's (`microllm tokenizer encode
--input-jsonl`). Needs `tokenizers` (and optionally `transformers`); no network.

  python3 tools/hf/check_trained_tokenizer.py --cli build/cpu-release/apps/microllm/microllm \\
      --work /tmp/trained_check [--corpus corpus.jsonl | --corpus text.txt] [--train FILE ...] \\
      [--vocab-size 8000] [--regex gpt2|llama3|qwen2|PATTERN] [--normalizer none|nfc] \\
      [--special-tokens "<|endoftext|>,<|im_start|>"] [--min-frequency 0] [--hf-trainer]

--corpus     the strings to encode: a JSONL file (make_corpus.py's rows, whose "text" is used,
             or one JSON string per line) or a plain text file (cut at blank lines). Default:
             tests/tokenizer/make_corpus.py writes one into --work (needs its English sources
             under /usr/share; pass --corpus where they are missing).
--train      training files (default: the corpus strings, one per line, in --work/train.txt).
--hf-trainer also trains HF's own BpeTrainer on the same documents (whole files, the same
             pre-tokenizer, no special tokens: HF does not split them out while training) and
             reports where its merges first differ from microllm's. Informational: exact
             equality with HF's trainer is not required (docs/tokenizer.md, "Training").

Checks, each failing the run: HF's ids == microllm's for every string (the strings the JS
oracle is known to read differently included: HF is the reference); HF's decode(ids)
reproduces the (NFC-normalized) string; and, when transformers imports,
AutoTokenizer.from_pretrained(--work/tokenizer) gives the same ids on the first 500 strings
(this loads tokenizer_config.json too). Prints a summary; exits 1 on any mismatch.
"""
import argparse
import json
import subprocess
import sys
import time
import unicodedata
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MAKE_CORPUS = REPO / "tests" / "tokenizer" / "make_corpus.py"
PRESETS = {  # the patterns of bpe_split_regex_preset (src/io/tokenizer/bpe_trainer.cpp)
    "gpt2": r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+",
    "llama3": r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    "qwen2": r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
}


def read_corpus(path):
    """[(name, text)] from a JSONL corpus or a plain text file."""
    path = Path(path)
    rows = []
    if path.suffix == ".jsonl":
        with open(path, encoding="utf-8") as f:
            for i, line in enumerate(f):
                if not line.strip():
                    continue
                value = json.loads(line)
                if isinstance(value, str):
                    rows.append((f"line{i + 1}", value))
                else:
                    rows.append((value.get("name", f"line{i + 1}"), value["text"]))
    else:
        text = path.read_bytes().decode("utf-8", "replace")
        rows = [(f"paragraph{i}", p + "\n\n") for i, p in enumerate(text.split("\n\n")) if p]
    return rows


def run(argv, **kwargs):
    print("check_trained_tokenizer: " + " ".join(str(a) for a in argv), file=sys.stderr, flush=True)
    return subprocess.run([str(a) for a in argv], check=True, **kwargs)


def first_difference(ours, theirs):
    i = 0
    while i < len(ours) and i < len(theirs) and ours[i] == theirs[i]:
        i += 1
    return (f"at index {i} (lengths {len(ours)} vs {len(theirs)}): microllm {ours[max(0, i - 3):i + 6]} "
            f"HF {theirs[max(0, i - 3):i + 6]}")


def hf_trainer_merges(args, pattern, train_files):
    """Merges of HF's BpeTrainer on the same documents, as (left, right) pairs."""
    from tokenizers import Regex, Tokenizer, models, normalizers, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE())
    if args.normalizer == "nfc":
        tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    trainer = trainers.BpeTrainer(vocab_size=args.vocab_size, min_frequency=args.min_frequency,
                                  show_progress=False, special_tokens=[],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    documents = [Path(f).read_bytes().decode("utf-8", "replace") for f in train_files]
    tok.train_from_iterator(documents, trainer=trainer)
    merges = json.loads(tok.to_str())["model"]["merges"]
    return [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in merges]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cli", required=True, help="the microllm executable")
    parser.add_argument("--work", required=True, help="folder for the corpus and the tokenizer")
    parser.add_argument("--corpus")
    parser.add_argument("--train", nargs="+")
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--regex", default="gpt2")
    parser.add_argument("--normalizer", default="none", choices=("none", "nfc"))
    parser.add_argument("--special-tokens", default="<|endoftext|>,<|im_start|>,<|im_end|>")
    parser.add_argument("--min-frequency", type=int, default=0)
    parser.add_argument("--hf-trainer", action="store_true")
    parser.add_argument("--report", type=int, default=10, help="mismatches to print")
    args = parser.parse_args()

    import tokenizers
    from tokenizers import Tokenizer

    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    corpus = args.corpus
    if corpus is None:
        corpus = work / "corpus.jsonl"
        run([sys.executable, MAKE_CORPUS, "--out", corpus])
    rows = read_corpus(corpus)
    train_files = args.train
    if not train_files:
        train_files = [work / "train.txt"]
        with open(train_files[0], "w", encoding="utf-8") as f:
            for _, text in rows:
                f.write(text + "\n")

    def train(out_dir, special_tokens):
        argv = [args.cli, "tokenizer", "train", "--vocab-size", args.vocab_size, "--out", out_dir,
                "--overwrite", "--regex", args.regex, "--normalizer", args.normalizer,
                "--min-frequency", args.min_frequency]
        if special_tokens:
            argv += ["--special-tokens", special_tokens]
        start = time.perf_counter()
        run(argv + list(train_files))
        return time.perf_counter() - start

    out = work / "tokenizer"
    train_seconds = train(out, args.special_tokens)

    # microllm's ids through the CLI, one JSON string per line in, one id array per line out.
    inputs = work / "inputs.jsonl"
    with open(inputs, "w", encoding="utf-8") as f:
        for _, text in rows:
            f.write(json.dumps(text) + "\n")
    done = run([args.cli, "tokenizer", "encode", "--tokenizer", out, "--input-jsonl", inputs],
               stdout=subprocess.PIPE, text=True)
    ours = [json.loads(line) for line in done.stdout.splitlines()]
    if len(ours) != len(rows):
        sys.exit(f"check_trained_tokenizer: microllm printed {len(ours)} id lists for {len(rows)} strings")

    hf = Tokenizer.from_file(str(out / "tokenizer.json"))
    failures, reported = 0, 0

    def report(message):
        nonlocal failures, reported
        failures += 1
        if reported < args.report:
            reported += 1
            print("MISMATCH " + message)

    equal = roundtrip = 0
    for (name, text), mine in zip(rows, ours):
        theirs = hf.encode(text, add_special_tokens=False).ids
        if theirs == mine:
            equal += 1
        else:
            report(f"{name}: ids {first_difference(mine, theirs)} text {json.dumps(text)[:200]}")
        want = unicodedata.normalize("NFC", text) if args.normalizer == "nfc" else text
        if hf.decode(theirs, skip_special_tokens=False) == want:
            roundtrip += 1
        else:
            report(f"{name}: HF decode(encode(x)) != x for {json.dumps(text)[:200]}")

    transformers_note = "transformers not installed: AutoTokenizer not checked"
    try:
        from transformers import AutoTokenizer
    except ImportError:
        AutoTokenizer = None
    if AutoTokenizer is not None:
        auto = AutoTokenizer.from_pretrained(str(out))
        sample = list(zip(rows, ours))[:500]
        same = 0
        for (name, text), mine in sample:
            if auto.encode(text, add_special_tokens=False) == mine:
                same += 1
            else:
                report(f"{name}: AutoTokenizer ids differ from microllm's for {json.dumps(text)[:200]}")
        transformers_note = f"AutoTokenizer ({type(auto).__name__}) equal on {same}/{len(sample)}"

    trainer_note = ""
    if args.hf_trainer:
        # Both without special tokens: HF's trainer counts their text like any other.
        plain = work / "tokenizer_no_specials"
        train(plain, "")
        mine = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m)
                for m in json.loads((plain / "tokenizer.json").read_text(encoding="utf-8"))["model"]["merges"]]
        theirs = hf_trainer_merges(args, PRESETS.get(args.regex, args.regex), train_files)
        k = 0
        while k < len(mine) and k < len(theirs) and mine[k] == theirs[k]:
            k += 1
        trainer_note = f"; HF BpeTrainer: first {k} of {len(mine)} merges equal"
        if not k == len(mine) == len(theirs):
            trainer_note += f" (then microllm {mine[k:k + 1]}, HF {theirs[k:k + 1]}; HF has {len(theirs)})"

    print(f"CHECK trained tokenizer: tokenizers {tokenizers.__version__}, {len(rows)} strings, "
          f"ids equal {equal}/{len(rows)}, HF round trip {roundtrip}/{len(rows)}, {transformers_note}, "
          f"training {train_seconds:.2f} s{trainer_note}; failures={failures}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
