"""Writes the tokenizer parity corpus: adversarial strings plus a few MB of real English.

    /usr/bin/python3 tests/tokenizer/make_corpus.py --out corpus.jsonl [--english-bytes N]

One JSON object per line (ASCII only: every non-ASCII character is escaped, so no JSONL
reader can split a line at U+2028 or a lone CR):
    {"name": "...", "text": "..."}                   encode "text"
    {"name": "...", "text": "...", "hex": "c3..."}   microllm encodes the bytes of "hex"
        (invalid UTF-8); "text" is their U+FFFD repair, which the oracle encodes
    {"name": ..., "text": ..., "js_differs": "why"}  the JavaScript oracle is known to differ
        from HF tokenizers here (HF wins; see docs/tokenizer.md); not compared exactly

Sections: hand-written edge cases, invalid UTF-8, 1,000+ random strings built from
adversarial fragment pools (seeded: the output is identical on every run), and English text
from Debian's /usr/share (licenses and CMake's documentation) cut at paragraph boundaries.
Characters are limited to those assigned by Unicode 14 (this Python's unicodedata) plus a
few Unicode 15.0 ones on purpose; nothing newer, because HF's Oniguruma, utf8proc and node's
ICU may carry different later versions.
"""
import argparse
import glob
import json
import os
import random
import sys
import unicodedata

SEED = 20240611
N_RANDOM = 1200

# ---------------------------------------------------------------------------------------
# Fragment pools
SPECIAL_TOKENS = [
    # Qwen3
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>", "<tool_call>", "</tool_call>",
    "<|vision_start|>", "<|fim_prefix|>", "<|file_sep|>",
    # Llama 3
    "<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>",
    "<|reserved_special_token_5|>", "<|reserved_special_token_250|>",
    # DeepSeek V3 (fullwidth bars, U+2581 in place of spaces)
    "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>", "<|EOT|>",
    "<｜tool▁calls▁begin｜>", "<｜tool▁sep｜>", "<｜place▁holder▁no▁7｜>",
]
LOOK_ALIKES = [
    "<|im_start", "<|im_start|", "im_start|>", "<|IM_START|>", "< |im_start|>", "<|im_start|>>", "<<|im_end|>",
    "<|endoftext", "<|endoftext|", "|endoftext|>", "<|begin_of_text", "<|reserved_special_token_251|>",
    "<|reserved_special_token_|>", "<think", "</think", "<thinking>", "<｜begin▁of▁sentence", "<｜User|>",
    "<|User｜>", "<｜User｜", "<|", "|>", "<||>", "<|>", "｜", "▁", "<|eot_id|", "<|eot_id||>",
]
WHITESPACE = [
    " ", "  ", "   ", "    ", "        ", "\t", "\t\t", " \t ", "\n", "\n\n", "\n\n\n", "\r\n", "\r\n\r\n", "\r",
    "\r\r\n", " \n", "\n ", " \r\n ", "\u00a0", "\u3000", "\u2028", "\u2029", "\u000b", "\u000c", "\u1680",
    "\u2002", "\u2009", "\u200a", "\u202f", "\u205f", "\u180e", "\u200b", "\u2060", " \u00a0 ",
]
WORDS = [
    "the", "The", "THE", "hello", "Hello", "world", "tokenizer", "Tokenization", "BPE", "GPU", "H200",
    "naïve", "café", "résumé", "Zürich", "straße", "STRASSE", "Øresund", "İstanbul", "ﬁle", "œuvre",
    "don", "won", "can", "shouldn", "it", "I", "you", "we", "they", "she", "that", "there",
    "x", "a", "_", "__init__", "camelCase", "snake_case", "kebab-case", "ALLCAPS", "MiXeD",
]
SCRIPTS = [
    "Привет", "мир", "Ελληνικά", "ἀρετή", "مرحبا", "بالعالم", "שלום", "עולם", "नमस्ते", "हिन्दी", "क़िला",
    "สวัสดี", "ภาษาไทย", "안녕하세요", "한국어", "こんにちは", "カタカナ", "ｶﾀｶﾅ", "日本語", "漢字", "你好",
    "世界", "中文分词测试", "繁體中文", "Tiếng Việt", "ქართული", "Հայերեն", "አማርኛ", "தமிழ்", "বাংলা",
    "ᠮᠣᠩᠭᠣᠯ", "བོད་ཡིག", "ភាសាខ្មែរ", "සිංහල", "ᏣᎳᎩ", "𐌰𐌱𐌲", "𝐀𝐁𝐂𝔘𝔫𝔦", "𝟙𝟚𝟛", "𠀀𠀁", "Ⓐⓑⓒ",
    "ꙮ", "ᚠᚢᚦ", "ߒߞߏ", "ⴰⵣⵓⵍ",
]
EMOJI = [
    "😀", "👍", "👍🏻", "👍🏽", "👍🏿", "👨‍👩‍👧‍👦", "👩🏽‍💻", "🧑🏿‍🤝‍🧑🏻", "🏳️‍🌈", "🏴‍☠️", "❤️", "❤️‍🔥", "❤",
    "🇯🇵", "🇺🇸🇬🇧", "🏴󠁧󠁢󠁳󠁣󠁴󠁿", "1️⃣", "#️⃣", "*️⃣", "🫶🏼", "🤷‍♀️", "🙇🏻‍♂️", "👁️‍🗨️", "✌️", "☺", "©", "™",
    # Unicode 15.0 (PCRE2 10.42's tables are Unicode 14: these exercise the category patch)
    "🫨", "🩷", "🪿", "🫎", "🪼", "🫸🏽",
]
UNICODE15_LETTERS = ["\U00031350\U00031351", "\U00011F04\U00011F05", "\U0001E4D0\U0001E4D1", "\U00011F50"]
COMBINING = [
    "e\u0301", "a\u0308", "o\u0302\u0301", "\u0301", "\u0301\u0301", "a\u0323\u0301", "a\u0301\u0323",
    "\u1100\u1161\u11a8", "\u1100\u1161", "Å", "\u212b", "\u2126", "\u212a", "\u0958", "x\u20dd", "ष्\u200dट",
    "Z̴͇̫a̶l̷g̸o̵", "q\u0307\u0323", "\u0041\u030a\u0301", "ﬀ", "\u00c5\u0301", "\u0e01\u0e34\u0e4d",
    "\u05d1\u05bc\u05b7", "n\u0303", "\u0345", "ᄀ\u1161\u11a8\u302e",
]
DIGIT_RUNS_FIXED = [
    "3.14159", "1,000,000", "1e-10", "0x1F", "2024-06-01", "12:30:45", "+1 (555) 010-9999", "٠١٢٣٤٥٦٧٨٩",
    "०१२३४५", "０１２３", "²³¹", "½⅓¾", "ⅠⅡⅫ", "①②③", "𝟘𝟙", "1.", "-0", "v1.2.3", "10%", "$9.99",
]
CONTRACTION_BASES = ["I", "you", "he", "she", "it", "we", "they", "that", "don", "can", "won", "Bob", "x", ""]
CONTRACTION_SUFFIXES = ["s", "t", "re", "ve", "m", "ll", "d"]
PUNCTUATION = [
    "!", "!!!", "...", "…", "—", "–", "?!", "¿¡", "«»", "„“", "「」", "、。", "！？", "【】", "~~~", "***", "###",
    "@#$%^&*()", "\\\\", "||", "<>", "</>", "''", "\"\"", "''s", "`", "```", "-->", "=>", "::", ";", "{}", "[]",
]
CODE = [
    "def f(x):\n    return x ** 2\n", "if (a && b) { return -1; }", "#include <stdio.h>\n",
    '{"key": [1, 2.5e-3, null], "b": true}', "https://example.com/path?q=1&r=%20#frag", "user@example.org",
    '<div class="x">&amp;&lt;</div>', "    indented\n\tmixed\n", "## Title\n- item **bold**\n", r"$\frac{a}{b}$",
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)", 'ls -la | grep "*.txt" > out 2>&1', "for (int i = 0; i < n; ++i)\r\n",
    "SELECT * FROM t WHERE id = 42;", "x = y  # comment   \n", "\\p{L}+\\s*", "a\\nb", "C:\\Users\\name",
]
CONTROLS = ["\x00", "\x01", "\x02", "\x1b[31m", "\x7f", "\x08", "\ue000", "\U000f0000", "\ufffd"]


def contraction(rng):
    suffix = "".join(c.upper() if rng.random() < 0.5 else c for c in rng.choice(CONTRACTION_SUFFIXES))
    return rng.choice(CONTRACTION_BASES) + rng.choice(["'", "'", "'", "’"]) + suffix


def digit_run(rng):
    if rng.random() < 0.3:
        return rng.choice(DIGIT_RUNS_FIXED)
    return "".join(rng.choice("0123456789") for _ in range(rng.choice([1, 2, 3, 4, 5, 6, 7, 9, 12, 25, 60])))


ASSIGNED_BLOCKS = [(0x20, 0x2FF), (0x370, 0x52F), (0x590, 0x6FF), (0x900, 0xDFF), (0xE00, 0xEFF), (0x1100, 0x11FF),
                   (0x1E00, 0x1FFF), (0x2000, 0x2BFF), (0x3000, 0x30FF), (0x4E00, 0x4F00), (0xAC00, 0xAD00),
                   (0xFB00, 0xFFFD), (0x10000, 0x1034F), (0x1D400, 0x1D7FF), (0x1F300, 0x1FAFF), (0x20000, 0x20100)]
EXCLUDED = {0x85, 0xFEFF}  # where the JavaScript oracle's \s is not HF's (hand-written cases cover them)


def random_chars(rng):
    out = []
    while len(out) < rng.randint(1, 6):
        lo, hi = rng.choice(ASSIGNED_BLOCKS)
        cp = rng.randint(lo, hi)
        ch = chr(cp)
        if cp in EXCLUDED or unicodedata.category(ch) in ("Cn", "Cs"):
            continue
        out.append(ch)
    return "".join(out)


POOLS = [
    (8, lambda r: r.choice(WORDS)),
    (5, lambda r: r.choice(SCRIPTS)),
    (7, lambda r: r.choice(WHITESPACE)),
    (4, lambda r: r.choice(EMOJI)),
    (3, lambda r: r.choice(COMBINING)),
    (4, digit_run),
    (4, contraction),
    (3, lambda r: r.choice(PUNCTUATION)),
    (3, lambda r: r.choice(SPECIAL_TOKENS)),
    (3, lambda r: r.choice(LOOK_ALIKES)),
    (2, lambda r: r.choice(CODE)),
    (2, random_chars),
    (1, lambda r: r.choice(UNICODE15_LETTERS)),
    (1, lambda r: r.choice(CONTROLS)),
]


def random_string(rng):
    weights = [w for w, _ in POOLS]
    count = rng.choice([1, 1, 2, 3, 4, 5, 6, 8, 10, 12, 16, 24, 40, 64])
    parts = []
    for _ in range(count):
        parts.append(rng.choices(POOLS, weights)[0][1](rng))
        roll = rng.random()
        if roll < 0.35:
            parts.append(" ")
        elif roll < 0.45:
            parts.append(rng.choice(WHITESPACE))
    text = "".join(parts)
    if rng.random() < 0.1:
        text += rng.choice(["  ", "\n", "\t", " \n\n", "\r"])  # trailing whitespace
    return text


# ---------------------------------------------------------------------------------------
# Hand-written cases
def handwritten():
    cases = {
        "empty": "",
        "space": " ",
        "spaces3": "   ",
        "spaces_long": " " * 300,
        "tab": "\t",
        "newline": "\n",
        "crlf": "\r\n",
        "lone_cr": "\r",
        "cr_text": "a\rb\r\rc\r",
        "crlf_text": "line one\r\nline two\r\n\r\nline four",
        "mixed_eol": "a\nb\r\nc\rd\n\re",
        "trailing_spaces": "hello   ",
        "trailing_newlines": "hello\n\n\n",
        "leading_spaces": "   hello",
        "spaces_before_word": "a      b",
        "tabs_run": "\t\t\tindent\t\t",
        "ws_mix": " \t \n \r\n \u00a0 \u3000 x",
        "hello": "Hello world",
        "hello_comma": "Hello, world!",
        "contractions_lower": "I'm you're he's we've they'll I'd don't",
        "contractions_upper": "I'M YOU'RE HE'S WE'VE THEY'LL I'D DON'T",
        "contractions_mixed": "I'M you'Re HE's We'VE they'Ll i'D dOn'T",
        "contraction_alone": "'s 't 're 've 'm 'll 'd 'S 'T 'RE 'VE 'M 'LL 'D",
        "apostrophes": "'''s '' ' 'x'",
        "curly_apostrophe": "don’t it’s I’M",
        "digits_long": "1234567890" * 10,
        "digits_mixed": "abc123def4567ghi89012",
        "digits_space": "1 22 333 4444 55555 666666",
        "digits_other": "٣٤٥ ०१२ ０１２ ²³ ⅫⅣ ①②",
        "float": "pi=3.14159265358979, e=2.71828",
        "cjk": "中文分词测试：你好，世界！",
        "cjk_digits": "第123章 2024年6月11日",
        "japanese": "日本語のテキストとカタカナ、ひらがな。",
        "korean": "한국어 텍스트입니다.",
        "mixed_scripts": "Hello世界123abcПривет🙂مرحبا",
        "emoji_zwj": "👨‍👩‍👧‍👦 family 👩🏽‍💻 coder 🏳️‍🌈",
        "emoji_skin": "👍🏻👍🏼👍🏽👍🏾👍🏿",
        "emoji_flags": "🇯🇵🇺🇸🇫🇷🇩🇪",
        "emoji_u15": "🫨🩷🪿🫎🪼 new in Unicode 15",
        "emoji_u15_space": "love 🩷 you",
        "letters_u15": "\U00031350\U00031351 \U00011F04x \U0001E4D0",
        "combining_nfd": "e\u0301 a\u0308 n\u0303",
        "combining_order": "a\u0323\u0301 a\u0301\u0323",
        "combining_start": "\u0301abc",
        "hangul_jamo": "\u1100\u1161\u11a8\u1102\u1161",
        "angstrom_ohm_kelvin": "\u212b \u2126 \u212a",
        "composition_exclusion": "\u0958\u0959",
        "zalgo": "Z̴͇̫a̶l̷g̸o̵ ̴t̷e̵x̶t̴",
        "zwj_zwnj": "a\u200db\u200cc",
        "mongolian_vowel_separator": "a\u180eb \u180e c",
        "zwsp": "a\u200bb\u200b \u200b",
        "nbsp_runs": "a\u00a0\u00a0b \u00a0 c",
        "ideographic_space": "a\u3000b\u3000\u3000c",
        "line_separator": "a\u2028b\u2029c",
        "vt_ff": "a\u000bb\u000cc",
        "controls": "a\x00b\x01c\x7fd\x1b[0m",
        "pua": "\ue000\uf8ff\U000f0000",
        "nonchar": "\uffff\U0010ffff",
        "replacement_char": "\ufffd\ufffd",
        "special_chatml": "<|im_start|>user\nHello!<|im_end|>\n<|im_start|>assistant\n",
        "special_adjacent": "abc<|im_end|>def<|endoftext|><|endoftext|>",
        "special_spaces": "  <|im_start|>  x  <|im_end|>  ",
        "special_combining_after": "<|im_end|>\u0301 <|endoftext|>\u0308x",
        "special_lookalikes": "<|im_start <|im_start| im_start|> <|IM_START|> < |im_start|>",
        "special_nested": "<<|im_end|>> <|<|im_start|>|>",
        "special_think": "<think>\nreasoning\n</think>\n\nanswer",
        "special_llama": "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>",
        "special_llama_reserved": "<|reserved_special_token_0|><|reserved_special_token_250|><|reserved_special_token_251|>",
        "special_deepseek": "<｜begin▁of▁sentence｜><｜User｜>Hi<｜Assistant｜><think>\n</think>ok<｜end▁of▁sentence｜>",
        "special_deepseek_lookalike": "<｜begin▁of▁sentence <|User｜> <｜User|> <|EOT|><|EOT|",
        "code_python": "def f(x):\n    return x ** 2  # square\n\n\nprint(f(3))\n",
        "code_c": "int main(void) {\n\tprintf(\"%d\\n\", 42);\n\treturn 0;\n}\n",
        "url": "https://example.com/a/b?c=d&e=%20f#g",
        "json": '{"a": [1, 2, {"b": null}], "c": "d\\u00e9"}',
        "punct_runs": "!!!??? ... …… ——– ***___",
        "long_word": "a" * 1000,
        "long_cjk": "汉" * 500,
        "long_emoji": "😀" * 200,
        "long_mixed_line": ("word " * 200).strip(),
        "single_letters": "a b c d e f g",
        "single_digit": "7",
        "single_punct": "?",
        "single_nonascii": "é",
        "ligatures": "ﬁ ﬂ ﬀ ﬃ",
        "fullwidth": "ＡＢＣ ａｂｃ ！＂＃",
    }
    out = [(f"hand/{name}", text, None) for name, text in cases.items()]
    # Known JavaScript-oracle differences: JS \s has U+FEFF and lacks U+0085; the JS port
    # rewrites (?i:'s|...) to ASCII-only classes, while Oniguruma's (?i) folds U+017F to s.
    out += [
        ("js/nel", "a\u0085b \u0085 c\u0085", "JS \\s lacks U+0085 (NEL); Oniguruma's \\s has it"),
        ("js/bom", "\ufeffhello \ufeff world\ufeff", "JS \\s has U+FEFF; Oniguruma's \\s does not"),
        ("js/long_s", "it'ſ IT'ſ", "Oniguruma's (?i) matches 'ſ (U+017F folds to s); the JS port's rewrite does not"),
    ]
    return out


def invalid_utf8():
    cases = [
        ("lone_continuation", b"\x80"),
        ("continuations", b"a\x80\x81\xbfb"),
        ("truncated2", b"abc\xc3"),
        ("truncated3", b"abc\xe2\x82"),
        ("truncated4", b"abc\xf0\x9f\x98"),
        ("truncated_mid", b"\xe2\x82 x \xf0\x9f y"),
        ("overlong", b"\xc0\xaf \xe0\x80\xaf \xf0\x80\x80\xaf"),
        ("surrogate", b"\xed\xa0\x80\xed\xbf\xbf"),
        ("above_max", b"\xf4\x90\x80\x80 \xf5\x80\x80\x80"),
        ("ff_fe", b"\xff\xfe hello \xfe\xff"),
        ("mixed", "héllo wörld ".encode() + b"\x9f\x9f" + "日本".encode() + b"\xe6\x97"),
        ("emoji_cut", "😀".encode()[:3] + "😀".encode()),
        ("c1_bytes", bytes(range(0x80, 0xa0))),
        ("all_high", bytes(range(0xc0, 0x100))),
        ("special_then_bad", b"<|im_end|>\xc3<|endoftext|>\xa9"),
    ]
    return [(f"invalid/{name}", raw) for name, raw in cases]


# ---------------------------------------------------------------------------------------
# English text from Debian's /usr/share, cut into chunks at blank lines.
def english_files():
    files = sorted(p for p in glob.glob("/usr/share/common-licenses/*") if os.path.isfile(p))
    files += sorted(glob.glob("/usr/share/cmake-*/Help/**/*.rst", recursive=True))
    seen, unique = set(), []
    for path in files:
        real = os.path.realpath(path)
        if real not in seen:
            seen.add(real)
            unique.append(path)
    return unique


def english_chunks(target_bytes, chunk_chars=4000):
    chunks, total = [], 0
    for path in english_files():
        if total >= target_bytes:
            break
        with open(path, "rb") as f:
            text = f.read().decode("utf-8", "replace")
        total += len(text.encode())
        paragraphs = text.split("\n\n")
        current, k = "", 0
        for i, para in enumerate(paragraphs):
            piece = para + ("\n\n" if i + 1 < len(paragraphs) else "")
            if current and len(current) + len(piece) > chunk_chars:
                chunks.append((f"english/{os.path.basename(path)}#{k}", current))
                current, k = "", k + 1
            current += piece
        if current:
            chunks.append((f"english/{os.path.basename(path)}#{k}", current))
    return chunks, total


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--english-bytes", type=int, default=2_500_000)
    args = parser.parse_args()
    rng = random.Random(SEED)
    rows = []
    for name, text, why in handwritten():
        row = {"name": name, "text": text}
        if why:
            row["js_differs"] = why
        rows.append(row)
    for name, raw in invalid_utf8():
        rows.append({"name": name, "text": raw.decode("utf-8", "replace"), "hex": raw.hex()})
    for i in range(N_RANDOM):
        rows.append({"name": f"random/{i}", "text": random_string(rng)})
    adversarial = len(rows)
    chunks, english = english_chunks(args.english_bytes)
    if english < 1_000_000:
        sys.exit(f"make_corpus: only {english} bytes of English under /usr/share (need cmake-data and base-files)")
    rows += [{"name": name, "text": text} for name, text in chunks]
    with open(args.out, "w", encoding="ascii") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=True) + "\n")
    print(f"make_corpus: {adversarial} adversarial strings, {len(chunks)} English chunks ({english} bytes) -> {args.out}")


if __name__ == "__main__":
    main()
