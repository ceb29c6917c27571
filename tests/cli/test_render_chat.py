"""`microllm tokenizer render-chat` end to end: the prompt printed exactly (no newline added),
the options, the batch mode, and one clear error line with a non-zero exit for bad input.

Uses the real templates of tests/fixtures/chat_templates/ and small tokenizer_config.json files
written here (the byte-identical comparison with the oracles is run_chat_parity.sh's job).
Run by CTest (label cpu) with MICROLLM_CLI pointing at the built binary.
"""

import json
import os
import subprocess
from pathlib import Path

CLI = os.environ.get("MICROLLM_CLI")
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "chat_templates"
R1 = FIXTURES / "deepseek-r1-distill-qwen.json"
LLAMA32 = FIXTURES / "llama-3.2-instruct.json"
CHATML = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content']"
          " + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}"
          "{% endif %}")


def run(*args, ok=True):
    assert CLI, "MICROLLM_CLI is not set"
    proc = subprocess.run([CLI, "tokenizer", "render-chat", *map(str, args)], capture_output=True, timeout=60)
    if ok:
        assert proc.returncode == 0, proc.stderr.decode()
    return proc


def assert_one_line_error(proc, *fragments):
    assert proc.returncode != 0
    lines = [l for l in proc.stderr.decode().splitlines() if l.strip()]
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("microllm: error:"), lines[0]
    for f in fragments:
        assert f in lines[0], (f, lines[0])


def write(path: Path, value) -> Path:
    path.write_text(json.dumps(value, ensure_ascii=False), encoding="utf-8")
    return path


def test_prints_the_prompt_exactly(tmp_path):
    messages = write(tmp_path / "m.json", [{"role": "system", "content": "Be brief."},
                                           {"role": "user", "content": "Hi"},
                                           {"role": "assistant", "content": "<think>\nr\n</think>\n\nHello!"},
                                           {"role": "user", "content": "Again"}])
    out = run("--tokenizer", R1, "--messages", messages, "--add-generation-prompt").stdout.decode()
    assert out == ("<｜begin▁of▁sentence｜>Be brief.<｜User｜>Hi<｜Assistant｜>\n\nHello!<｜end▁of▁sentence｜>"
                   "<｜User｜>Again<｜Assistant｜><think>\n")
    out = run("--tokenizer", R1, "--messages", messages).stdout.decode()
    assert out.endswith("<｜User｜>Again")


def test_directory_and_family_override(tmp_path):
    folder = tmp_path / "model"
    folder.mkdir()
    write(folder / "tokenizer_config.json", {"chat_template": CHATML, "eos_token": "<|im_end|>"})
    messages = write(tmp_path / "m.json", [{"role": "user", "content": "Hi"}])
    assert run("--tokenizer", folder, "--messages", messages).stdout.decode() == "<|im_start|>user\nHi<|im_end|>\n"
    # qwen2_5 named explicitly: ChatML with Qwen's default system prompt, template not read.
    out = run("--tokenizer", folder, "--messages", messages, "--template-family", "qwen2_5",
              "--add-generation-prompt").stdout.decode()
    assert out == ("<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant."
                   "<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")
    out = run("--tokenizer", folder, "--messages", messages, "--template-family", "qwen3",
              "--add-generation-prompt", "--enable-thinking", "false").stdout.decode()
    assert out.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")


def test_date_string(tmp_path):
    messages = write(tmp_path / "m.json", [{"role": "user", "content": " Hi "}])
    out = run("--tokenizer", LLAMA32, "--messages", messages, "--date-string", "01 Jan 2025").stdout.decode()
    assert out == ("<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: "
                   "December 2023\nToday Date: 01 Jan 2025\n\n<|eot_id|><|start_header_id|>user<|end_header_id|>"
                   "\n\nHi<|eot_id|>")


def test_requests_jsonl(tmp_path):
    requests = tmp_path / "r.jsonl"
    rows = [{"messages": [{"role": "user", "content": "Hi"}]},
            {"messages": [{"role": "user", "content": "Hi"}], "add_generation_prompt": True},
            {"messages": [{"role": "user", "content": "日本"}]}]
    requests.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    lines = run("--tokenizer", R1, "--requests-jsonl", requests).stdout.decode().splitlines()
    assert [json.loads(l) for l in lines] == [
        "<｜begin▁of▁sentence｜><｜User｜>Hi", "<｜begin▁of▁sentence｜><｜User｜>Hi<｜Assistant｜><think>\n",
        "<｜begin▁of▁sentence｜><｜User｜>日本"]


def test_bad_input_is_one_error_line(tmp_path):
    good = write(tmp_path / "good.json", [{"role": "user", "content": "Hi"}])
    assert_one_line_error(run("--tokenizer", R1, "--messages", tmp_path / "missing.json", ok=False), "cannot read")
    assert_one_line_error(run("--tokenizer", tmp_path / "nope", "--messages", good, ok=False), "does not exist")
    bad = tmp_path / "bad.json"
    bad.write_text("[{", encoding="utf-8")
    assert_one_line_error(run("--tokenizer", R1, "--messages", bad, ok=False), "not valid JSON")
    cases = [
        ({"role": "user", "content": "Hi"}, "must be a JSON list"),
        ([], "messages is empty"),
        (["Hi"], "messages[0] must be an object"),
        ([{"content": "Hi"}], "needs a string \"role\""),
        ([{"role": "tool", "content": "42"}], "role 'tool' is not supported"),
        ([{"role": "user", "content": None}], "\"content\" must be a string, found null"),
        ([{"role": "user", "content": [{"type": "text", "text": "Hi"}]}], "must be a string, found array"),
        ([{"role": "user"}], "must be a string, found nothing"),
        ([{"role": "assistant", "content": "", "tool_calls": [{"id": "1"}]}], "\"tool_calls\" is not supported"),
    ]
    for i, (messages, fragment) in enumerate(cases):
        path = write(tmp_path / f"case{i}.json", messages)
        assert_one_line_error(run("--tokenizer", R1, "--messages", path, ok=False), fragment)
    # A template microllm does not know, or none: an error that names the way out.
    folder = tmp_path / "unknown"
    folder.mkdir()
    write(folder / "tokenizer_config.json", {"chat_template": "{{ messages[0]['content'] }}"})
    assert_one_line_error(run("--tokenizer", folder, "--messages", good, ok=False),
                          "not one microllm recognises", "--template-family chatml|qwen2_5|qwen3")
    write(folder / "tokenizer_config.json", {"eos_token": "</s>"})
    assert_one_line_error(run("--tokenizer", folder, "--messages", good, ok=False), "has no chat_template",
                          "--template-family")
    assert_one_line_error(run("--tokenizer", R1, "--messages", good, "--template-family", "mistral", ok=False),
                          "unknown template family 'mistral'")
    # Meta's Llama 3 template writes bos_token; a config without one is an error, as in Jinja2.
    write(folder / "tokenizer_config.json", {})
    assert_one_line_error(run("--tokenizer", folder, "--messages", good, "--template-family", "llama3", ok=False),
                          "bos_token")
