"""The peer side of the tokenizer benchmark: Hugging Face `tokenizers` on one thread, the same
strings, the same passes, the same JSON as microllm_bench_tokenizer (bench_tokenizer.cpp):

  RAYON_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false \\
  python3 bench/tokenizer/hf_tokenizer_bench.py --tokenizer DIR --input strings.jsonl \\
      [--warmup 2] [--repetitions 10]

A repetition calls Tokenizer.from_file(DIR/tokenizer.json).encode(s, add_special_tokens=False)
for every string s (one call per string, never encode_batch, so no thread pool is involved).
run_tokenizer_bench.py sets the two environment variables before starting this process, so
they hold before `tokenizers` is imported; they are checked here too.
"""
import argparse
import json
import os
import sys
import time


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokenizer", required=True)
    parser.add_argument("--input", required=True)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--repetitions", type=int, default=10)
    args = parser.parse_args()
    out = {"schema": "microllm-bench-tokenizer-v1", "side": "hf_tokenizers", "tokenizer": args.tokenizer}
    try:
        if os.environ.get("RAYON_NUM_THREADS") != "1" or os.environ.get("TOKENIZERS_PARALLELISM") != "false":
            raise RuntimeError("set RAYON_NUM_THREADS=1 and TOKENIZERS_PARALLELISM=false (one thread)")
        import tokenizers
        from tokenizers import Tokenizer

        start = time.perf_counter()
        tok = Tokenizer.from_file(os.path.join(args.tokenizer, "tokenizer.json"))
        load_s = time.perf_counter() - start
        with open(args.input, encoding="utf-8") as f:
            strings = [json.loads(line) for line in f if line.strip()]
        fnv, tokens = 1469598103934665603, 0
        for s in strings:
            for i in tok.encode(s, add_special_tokens=False).ids:
                fnv = ((fnv ^ i) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
                tokens += 1
        encode = tok.encode
        for _ in range(args.warmup):
            for s in strings:
                encode(s, add_special_tokens=False)
        samples = []
        for _ in range(args.repetitions):
            start = time.perf_counter()
            for s in strings:
                encode(s, add_special_tokens=False)
            samples.append(time.perf_counter() - start)
        out.update({
            "strings": len(strings),
            "bytes": sum(len(s.encode("utf-8")) for s in strings),
            "tokens": tokens,
            "ids_fnv1a": str(fnv),
            "warmup": args.warmup,
            "repetitions": args.repetitions,
            "samples_s": samples,
            "load_s": load_s,
            "versions": {"tokenizers": tokenizers.__version__, "python": sys.version.split()[0]},
        })
    except Exception as e:  # reported in the JSON, as the C++ side does
        out["error"] = f"{type(e).__name__}: {e}"
        print(json.dumps(out))
        return 1
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
