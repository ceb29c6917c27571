// Text -> pieces: normalizers, Split behaviors (HF split.rs's own cases), the Qwen / Llama 3
// / DeepSeek / GPT-2 regexes on known strings, Oniguruma's \s and Unicode 15 categories on
// PCRE2 (checked on every code point), and ByteLevel's add_prefix_space.
#include <gtest/gtest.h>
#include <utf8proc.h>

#include <set>
#include <string>
#include <vector>

#include "../../src/io/tokenizer/components.h"
#include "core/expect_error.h"
#include "io/tokenizer_test_util.h"

namespace microllm::testing {
namespace {

using Pieces = std::vector<std::string>;

const char* const kQwen =
    R"re((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";
const char* const kLlama3 =
    R"re((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";
const char* const kDeepSeekWords =
    R"re([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";

io::Tokenizer with_pre_tokenizer(nlohmann::json pre_tokenizer, nlohmann::json normalizer = nullptr,
                                 nlohmann::json added = nlohmann::json::array()) {
  TinySpec spec;
  spec.pre_tokenizer = std::move(pre_tokenizer);
  spec.normalizer = std::move(normalizer);
  spec.added_tokens = std::move(added);
  return tiny_tokenizer(spec);
}

io::Tokenizer with_split(const std::string& regex) {
  return with_pre_tokenizer(sequence_pre_tokenizer({split_step(regex)}));
}

TEST(TokenizerNormalizer, NormalFormsAndSequence) {
  auto norm = [](const char* type) {
    return with_pre_tokenizer(byte_level_pre_tokenizer(), {{"type", type}});
  };
  EXPECT_EQ(norm("NFC").normalize(s8(u8"e\u0301")), s8(u8"\u00e9"));
  EXPECT_EQ(norm("NFC").normalize(s8(u8"a\u0301\u0323")),
            s8(u8"\u1ea1\u0301"));  // reordered, then composed
  EXPECT_EQ(norm("NFC").normalize(s8(u8"\u212b\u2126")), s8(u8"\u00c5\u03a9"));
  EXPECT_EQ(norm("NFC").normalize(s8(u8"\u0958")),
            s8(u8"\u0915\u093c"));  // a composition exclusion
  EXPECT_EQ(norm("NFC").normalize(s8(u8"\ufb01")), s8(u8"\ufb01"));
  EXPECT_EQ(norm("NFD").normalize(s8(u8"\u00e9")), s8(u8"e\u0301"));
  EXPECT_EQ(norm("NFKC").normalize(s8(u8"\ufb01\u00b2")), "fi2");
  EXPECT_EQ(norm("NFKD").normalize(s8(u8"\u00e9\ufb01")), s8(u8"e\u0301fi"));
  const io::Tokenizer seq = with_pre_tokenizer(
      byte_level_pre_tokenizer(),
      {{"type", "Sequence"}, {"normalizers", {{{"type", "NFD"}}, {{"type", "NFC"}}}}});
  EXPECT_EQ(seq.normalize(s8(u8"e\u0301")), s8(u8"\u00e9"));
  EXPECT_EQ(with_pre_tokenizer(byte_level_pre_tokenizer()).normalize(s8(u8"e\u0301")),
            s8(u8"e\u0301"));
  // Encoding sees the normalized text.
  EXPECT_EQ(norm("NFC").encode(s8(u8"e\u0301"), false), (std::vector<int32_t>{0xC3, 0xA9}));
}

// HF tokenizers' own Split test (pre_tokenizers/split.rs `basic`), with \w spelled out.
TEST(TokenizerSplit, BehaviorsMatchHuggingFaceSplitTests) {
  const std::string words = R"([\p{L}\p{N}_]+|[^\p{L}\p{N}_\s]+)";
  const std::string text = "How are you doing?";
  const std::vector<std::pair<std::string, Pieces>> cases = {
      {"Removed", {"How", "are", "you", "doing", "?"}},
      {"Isolated", {"How", " ", "are", " ", "you", " ", "doing", "?"}},
      {"MergedWithPrevious", {"How ", "are ", "you ", "doing", "?"}},
      {"MergedWithNext", {"How", " are", " you", " doing", "?"}},
      {"Contiguous", {"How", " ", "are", " ", "you", " ", "doing?"}},
  };
  for (const auto& [behavior, pieces] : cases) {
    const io::Tokenizer t =
        with_pre_tokenizer(sequence_pre_tokenizer({split_step(words, behavior, /*invert=*/true)}));
    EXPECT_EQ(t.pre_tokenize(text), pieces) << behavior;
  }
}

TEST(TokenizerSplit, InvertAndStringPatterns) {
  // split.rs `invert`: splitting on " " equals matching "Hello" with invert.
  const nlohmann::json on_space = {{"type", "Split"},
                                   {"pattern", {{"String", " "}}},
                                   {"behavior", "Removed"},
                                   {"invert", false}};
  const nlohmann::json on_hello = {{"type", "Split"},
                                   {"pattern", {{"String", "Hello"}}},
                                   {"behavior", "Removed"},
                                   {"invert", true}};
  EXPECT_EQ(
      with_pre_tokenizer(sequence_pre_tokenizer({on_space})).pre_tokenize("Hello Hello Hello"),
      (Pieces{"Hello", "Hello", "Hello"}));
  EXPECT_EQ(
      with_pre_tokenizer(sequence_pre_tokenizer({on_hello})).pre_tokenize("Hello Hello Hello"),
      (Pieces{"Hello", "Hello", "Hello"}));
  // split.rs `regex_string`: String " " and Regex \s+ agree on "Hey, man!".
  EXPECT_EQ(with_pre_tokenizer(sequence_pre_tokenizer({on_space})).pre_tokenize("Hey, man!"),
            (Pieces{"Hey,", "man!"}));
  EXPECT_EQ(with_pre_tokenizer(sequence_pre_tokenizer({split_step(R"(\s+)", "Removed")}))
                .pre_tokenize("Hey, man!"),
            (Pieces{"Hey,", "man!"}));
  // Regex metacharacters in a String pattern are literal.
  const nlohmann::json on_dots = {{"type", "Split"},
                                  {"pattern", {{"String", ".*"}}},
                                  {"behavior", "Isolated"},
                                  {"invert", false}};
  EXPECT_EQ(with_pre_tokenizer(sequence_pre_tokenizer({on_dots})).pre_tokenize("a.*b"),
            (Pieces{"a", ".*", "b"}));
}

TEST(TokenizerSplit, EmptyMatchesLeaveNoEmptyPieces) {
  EXPECT_EQ(with_split("x*").pre_tokenize("abxxc"), (Pieces{"a", "b", "xx", "c"}));
}

TEST(TokenizerSplit, QwenAndLlamaDigitsDiffer) {
  EXPECT_EQ(with_split(kQwen).pre_tokenize("Hello world 12345"),
            (Pieces{"Hello", " world", " ", "1", "2", "3", "4", "5"}));
  EXPECT_EQ(with_split(kLlama3).pre_tokenize("Hello world 12345"),
            (Pieces{"Hello", " world", " ", "123", "45"}));
}

TEST(TokenizerSplit, ContractionsInEveryCase) {
  EXPECT_EQ(with_split(kQwen).pre_tokenize("I'M you're HE'S they'Ll"),
            (Pieces{"I", "'M", " you", "'re", " HE", "'S", " they", "'Ll"}));
}

TEST(TokenizerSplit, WhitespaceRunsAndLineBreaks) {
  const io::Tokenizer t = with_split(kQwen);
  EXPECT_EQ(t.pre_tokenize("a  b"), (Pieces{"a", " ", " b"}));
  EXPECT_EQ(t.pre_tokenize("hi  "), (Pieces{"hi", "  "}));
  EXPECT_EQ(t.pre_tokenize("a\r\nb"), (Pieces{"a", "\r\n", "b"}));
  EXPECT_EQ(t.pre_tokenize("x\n\n  y"), (Pieces{"x", "\n\n", " ", " y"}));
  EXPECT_EQ(t.pre_tokenize("a\rb"), (Pieces{"a", "\r", "b"}));
  EXPECT_EQ(t.pre_tokenize("x!!\n"), (Pieces{"x", "!!\n"}));
}

TEST(TokenizerSplit, WhitespaceIsOnigurumasNotPcre2s) {
  // U+180E (Mongolian vowel separator, Cf since Unicode 6.3) is \s for PCRE2, not for
  // Oniguruma: here it joins the punctuation run around it, as in HF.
  EXPECT_EQ(with_split(kQwen).pre_tokenize(s8(u8"!\u180e!")), (Pieces{s8(u8"!\u180e!")}));
  // U+0085 (NEL) is \s for Oniguruma.
  EXPECT_EQ(with_split(R"(\s+)").pre_tokenize(s8(u8"a\u0085b")),
            (Pieces{"a", s8(u8"\u0085"), "b"}));
}

TEST(TokenizerSplit, UnicodeFifteenCategories) {
  // U+31350 (CJK Extension H, Unicode 15) is a letter: one piece with the x before it.
  EXPECT_EQ(with_split(kQwen).pre_tokenize(s8(u8"x\U00031350")), (Pieces{s8(u8"x\U00031350")}));
  // U+1FA77 PINK HEART (Unicode 15) is a symbol, so it joins the space before it.
  EXPECT_EQ(with_split(kDeepSeekWords).pre_tokenize(s8(u8"love \U0001FA77 you")),
            (Pieces{"love", s8(u8" \U0001FA77"), " you"}));
}

TEST(TokenizerSplit, SplitStepsChainLikeDeepSeeks) {
  const io::Tokenizer t = with_pre_tokenizer(sequence_pre_tokenizer(
      {split_step(R"(\p{N}{1,3})"), split_step(s8(u8"[一-龥぀-ゟ゠-ヿ]+")),
       split_step(kDeepSeekWords)}));
  EXPECT_EQ(t.pre_tokenize(s8(u8"abc12345日本語x!?")),
            (Pieces{"abc", "123", "45", s8(u8"日本語"), "x", "!?"}));
}

TEST(TokenizerByteLevelPreTokenizer, GptTwoRegexAndPrefixSpace) {
  EXPECT_EQ(with_pre_tokenizer(byte_level_pre_tokenizer(false, true))
                .pre_tokenize("Hello world's 123  x"),
            (Pieces{"Hello", " world", "'s", " 123", " ", " x"}));
  // add_prefix_space: every piece left between added tokens gets the space, as in HF.
  const io::Tokenizer prefixed = with_pre_tokenizer(byte_level_pre_tokenizer(true, true), nullptr,
                                                    {added_token(256, "<s>", true)});
  EXPECT_EQ(prefixed.pre_tokenize("a<s>b"), (Pieces{" a", "<s>", " b"}));
  EXPECT_EQ(prefixed.pre_tokenize(" a"), (Pieces{" a"}));
  EXPECT_EQ(prefixed.encode("a", false), (std::vector<int32_t>{' ', 'a'}));
}

TEST(TokenizerRegex, TranslationSpellsOutOnigurumaMeaning) {
  using io::tokenizer_detail::translate_oniguruma_pattern;
  EXPECT_EQ(translate_oniguruma_pattern(R"(\s+)", "t"), R"([\t-\r\x{85}\p{Z}]+)");
  EXPECT_EQ(translate_oniguruma_pattern(R"((?!\S))", "t"), R"((?![^\t-\r\x{85}\p{Z}]))");
  EXPECT_EQ(translate_oniguruma_pattern(R"([^\s\p{Z}])", "t"), R"([^\t-\r\x{85}\p{Z}\p{Z}])");
  const std::string letters = translate_oniguruma_pattern(R"(\p{L})", "t");
  EXPECT_EQ(letters.rfind(R"([\p{L}\x{)", 0), 0u) << letters;  // PCRE2's \p{L} plus Unicode 15's
  EXPECT_EQ(translate_oniguruma_pattern(R"([[:alpha:]]\p{Han})", "t"), R"([[:alpha:]]\p{Han})");
  EXPECT_TRUE(throws_error([] { translate_oniguruma_pattern(R"(\w+)", "f.json"); }, "tokenizer",
                           {"f.json", "\\w"}));
  EXPECT_TRUE(throws_error([] { translate_oniguruma_pattern(R"([\S])", "f.json"); }, "tokenizer",
                           {"\\S inside"}));
  EXPECT_TRUE(throws_error([] { translate_oniguruma_pattern(R"([a-z&&[^b]])", "f.json"); },
                           "tokenizer", {}));
  EXPECT_TRUE(throws_error([] { translate_oniguruma_pattern(R"([abc)", "f.json"); }, "tokenizer",
                           {"unterminated"}));
}

// The translated classes agree with utf8proc (Unicode 15) on every code point.
TEST(TokenizerRegex, CategoriesAgreeWithUnicodeFifteenOnEveryCodePoint) {
  std::string all;
  std::vector<char32_t> code_points;
  for (char32_t cp = 0; cp <= 0x10FFFF; ++cp) {
    if (cp >= 0xD800 && cp <= 0xDFFF) continue;
    io::tokenizer_detail::utf8_append(all, cp);
    code_points.push_back(cp);
  }
  auto matched = [&](const std::string& pattern) {
    const io::tokenizer_detail::Regex regex(pattern, "test");
    std::vector<std::pair<size_t, size_t>> matches;
    regex.find_all(all, matches);
    std::set<char32_t> out;
    for (const auto& [s, e] : matches) out.insert(io::tokenizer_detail::utf8_decode_at(all, s));
    return out;
  };
  const std::vector<std::pair<std::string, std::vector<int>>> categories = {
      {"L",
       {UTF8PROC_CATEGORY_LU, UTF8PROC_CATEGORY_LL, UTF8PROC_CATEGORY_LT, UTF8PROC_CATEGORY_LM,
        UTF8PROC_CATEGORY_LO}},
      {"N", {UTF8PROC_CATEGORY_ND, UTF8PROC_CATEGORY_NL, UTF8PROC_CATEGORY_NO}},
      {"M", {UTF8PROC_CATEGORY_MN, UTF8PROC_CATEGORY_MC, UTF8PROC_CATEGORY_ME}},
      {"P",
       {UTF8PROC_CATEGORY_PC, UTF8PROC_CATEGORY_PD, UTF8PROC_CATEGORY_PS, UTF8PROC_CATEGORY_PE,
        UTF8PROC_CATEGORY_PI, UTF8PROC_CATEGORY_PF, UTF8PROC_CATEGORY_PO}},
      {"S",
       {UTF8PROC_CATEGORY_SM, UTF8PROC_CATEGORY_SC, UTF8PROC_CATEGORY_SK, UTF8PROC_CATEGORY_SO}},
      {"Nd", {UTF8PROC_CATEGORY_ND}},
  };
  for (const auto& [name, cats] : categories) {
    const std::set<char32_t> got = matched("\\p{" + name + "}");
    size_t wrong = 0;
    for (const char32_t cp : code_points) {
      bool expected = false;
      for (const int c : cats)
        expected |= utf8proc_category(static_cast<utf8proc_int32_t>(cp)) == c;
      wrong += expected != (got.count(cp) > 0);
    }
    EXPECT_EQ(wrong, 0u) << "\\p{" << name << "}";
  }
  const std::set<char32_t> white_space = {0x09,   0x0A,   0x0B,   0x0C,   0x0D,   0x20,   0x85,
                                          0xA0,   0x1680, 0x2000, 0x2001, 0x2002, 0x2003, 0x2004,
                                          0x2005, 0x2006, 0x2007, 0x2008, 0x2009, 0x200A, 0x2028,
                                          0x2029, 0x202F, 0x205F, 0x3000};
  EXPECT_EQ(matched(R"(\s)"), white_space);
  const std::set<char32_t> not_space = matched(R"(\S)");
  EXPECT_EQ(not_space.size() + white_space.size(), code_points.size());
}

}  // namespace
}  // namespace microllm::testing
