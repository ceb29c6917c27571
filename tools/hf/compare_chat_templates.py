"""Compares `microllm tokenizer render-chat` with Hugging Face transformers'
`tokenizer.apply_chat_template(messages, tokenize=False, ...)`, byte for byte, on the
conversations of tests/tokenizer/make_chat_cases.py (every case, the ones the JS oracle of
CTest chat_template_parity skips included). Needs transformers (and jinja2); no network.

  python3 tools/hf/compare_chat_templates.py --cli build/cpu-release/apps/microllm/microllm \\
      --tokenizer qwen2_5=/models/Qwen2.5-0.5B-Instruct \\
      --tokenizer qwen3=/models/Qwen3-0.6B \\
      --tokenizer llama3=build/.cache/tokenizers/llama3 \\
      --tokenizer deepseek_r1=/models/DeepSeek-R1-Distill-Qwen-1.5B \\
      --template llama3_2=tests/fixtures/chat_templates/llama-3.2-instruct.json@build/.cache/tokenizers/llama3_1 \\
      --template r1_fixture=tests/fixtures/chat_templates/deepseek-r1-distill-qwen.json@/models/DeepSeek-R1-Distill-Qwen-1.5B

--tokenizer NAME=DIR   a tokenizer directory (tokenizer.json + tokenizer_config.json, as
                       AutoTokenizer.from_pretrained reads it); microllm reads the same
                       tokenizer_config.json.
--template NAME=FILE@DIR  a chat template fixture (tokenizer_config.json-shaped: chat_template,
                       bos_token, eos_token): HF renders it with the tokenizer of DIR, passing
                       chat_template= and the fixture's bos_token / eos_token; microllm reads
                       FILE. When DIR's own chat_template is the fixture's, that is reported too
                       (it checks the fixture against a real model directory).

Each case passes add_generation_prompt and, when the case has them, enable_thinking and
date_string as keyword arguments (templates that do not use them ignore them). Cases without
date_string render Llama 3.2's strftime_now date on both sides from this machine's clock.
Prints one summary line per name and the first differences; exits 1 on any difference or
error, 0 when every case is equal.
"""
import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MAKE_CASES = REPO / "tests" / "tokenizer" / "make_chat_cases.py"


def parse_pair(text, option):
    name, sep, value = text.partition("=")
    if not sep or not name or not value:
        raise SystemExit(f"compare_chat_templates.py: {option} expects NAME=VALUE, got {text!r}")
    return name, value


def load_cases(path):
    with open(path, encoding="utf-8", newline="\n") as f:
        return [json.loads(line) for line in f if line.strip()]


def hf_render(tokenizer, case, chat_template=None, specials=None):
    """apply_chat_template for one case; the text, or 'ERROR: ...' when HF raises."""
    kwargs = dict(specials or {})
    for key in ("enable_thinking", "date_string"):
        if key in case:
            kwargs[key] = case[key]
    if chat_template is not None:
        kwargs["chat_template"] = chat_template
    try:
        return tokenizer.apply_chat_template(case["messages"], tokenize=False,
                                             add_generation_prompt=case["add_generation_prompt"], **kwargs)
    except Exception as e:  # a template error is a result to compare, not a crash
        return f"ERROR: {type(e).__name__}: {e}"


def microllm_render(cli, config_path, cases_path):
    """render-chat --requests-jsonl over all cases: one text per case, or None with the error."""
    proc = subprocess.run([cli, "tokenizer", "render-chat", "--tokenizer", str(config_path),
                           "--requests-jsonl", str(cases_path)], capture_output=True)
    if proc.returncode != 0:
        return None, proc.stderr.decode("utf-8", "replace").strip()
    # split("\n"), not splitlines(): the JSON lines hold raw U+0085 and U+2028.
    return [json.loads(line) for line in proc.stdout.decode("utf-8").split("\n") if line], None


def compare(name, cases, want, got, report, show):
    bad = [(c["id"], w, g) for c, w, g in zip(cases, want, got) if w != g]
    conversations = {c["id"].split("/")[0] for c in cases}
    status = "equal" if not bad else f"{len(bad)} DIFFER"
    print(f"HF {name}: {len(conversations)} conversations, {len(cases)} cases, {status}")
    for case_id, w, g in bad[:show]:
        print(f"  {case_id}\n    transformers: {w!r}\n    microllm:     {g!r}")
    report[name] = {"cases": len(cases), "differ": [case_id for case_id, _, _ in bad]}
    return not bad


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("--cli", required=True, help="the microllm binary")
    parser.add_argument("--tokenizer", action="append", default=[], metavar="NAME=DIR")
    parser.add_argument("--template", action="append", default=[], metavar="NAME=FILE@DIR")
    parser.add_argument("--cases", help="cases JSONL (default: written by make_chat_cases.py)")
    parser.add_argument("--report", help="write a JSON report of the differing case ids here")
    parser.add_argument("--show", type=int, default=3, help="differences printed per name")
    args = parser.parse_args(argv)
    if not args.tokenizer and not args.template:
        parser.error("give at least one --tokenizer NAME=DIR or --template NAME=FILE@DIR")

    from transformers import AutoTokenizer  # only here, so --help works without transformers

    with tempfile.TemporaryDirectory() as tmp:
        cases_path = Path(args.cases) if args.cases else Path(tmp) / "cases.jsonl"
        if not args.cases:
            subprocess.run([sys.executable, str(MAKE_CASES), "--out", str(cases_path)], check=True)
        cases = load_cases(cases_path)

        jobs = []  # (name, tokenizer dir, microllm --tokenizer path, fixture or None)
        for text in args.tokenizer:
            name, directory = parse_pair(text, "--tokenizer")
            jobs.append((name, directory, directory, None))
        for text in args.template:
            name, value = parse_pair(text, "--template")
            fixture, sep, directory = value.partition("@")
            if not sep:
                raise SystemExit(f"compare_chat_templates.py: --template expects NAME=FILE@DIR, got {text!r}")
            jobs.append((name, directory, fixture, json.loads(Path(fixture).read_text(encoding="utf-8"))))

        ok, report = True, {}
        for name, directory, config_path, fixture in jobs:
            tokenizer = AutoTokenizer.from_pretrained(directory, local_files_only=True)
            if fixture is None:
                want = [hf_render(tokenizer, c) for c in cases]
            else:
                specials = {k: fixture[k] for k in ("bos_token", "eos_token") if fixture.get(k) is not None}
                want = [hf_render(tokenizer, c, fixture["chat_template"], specials) for c in cases]
                same = getattr(tokenizer, "chat_template", None) == fixture["chat_template"]
                print(f"HF {name}: the fixture's chat_template is {'IDENTICAL to' if same else 'not'} "
                      f"the one in {directory}")
            got, error = microllm_render(args.cli, config_path, cases_path)
            if got is None:
                print(f"HF {name}: microllm failed: {error}")
                report[name] = {"error": error}
                ok = False
                continue
            ok = compare(name, cases, want, got, report, args.show) and ok
        if args.report:
            Path(args.report).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print("compare_chat_templates.py: all equal" if ok else "compare_chat_templates.py: DIFFERENCES (see above)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
