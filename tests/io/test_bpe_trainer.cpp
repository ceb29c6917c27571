// The byte-level BPE trainer: merges derived by hand on tiny corpora (counts, tie-break,
// overlapping pairs, min_frequency), determinism, the written tokenizer.json (layout and ids),
// round trips through microllm's Tokenizer, invalid UTF-8, NFC, and every error path.
// Parity of the written file with the node oracle: tests/tokenizer/run_trained_parity.sh.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/expect_error.h"
#include "io/tokenizer_test_util.h"
#include "microllm/io/bpe_trainer.h"

namespace microllm::testing {
namespace {

using io::BpeTrainer;
using io::BpeTrainerConfig;
using io::BpeTrainingResult;
using Merges = std::vector<std::pair<std::string, std::string>>;

BpeTrainerConfig config_with(int64_t vocab_size, const std::string& regex) {
  BpeTrainerConfig c;
  c.vocab_size = vocab_size;
  c.split_regex = regex;
  return c;
}

BpeTrainingResult train_on(const BpeTrainerConfig& config, const std::vector<std::string>& docs) {
  BpeTrainer trainer(config);
  for (const std::string& d : docs) trainer.add_text(d);
  return trainer.train();
}

io::Tokenizer load(const BpeTrainingResult& result, const BpeTrainerConfig& config) {
  return io::Tokenizer::from_json(io::bpe_tokenizer_json(result, config),
                                  io::bpe_tokenizer_config_json(result, config), "trained.json");
}

std::string repeat_words(const std::vector<std::pair<std::string, int>>& words) {
  std::string text;
  for (const auto& [word, n] : words)
    for (int i = 0; i < n; ++i) text += word + " ";
  return text;
}

std::filesystem::path fresh_dir(const std::string& name) {
  const auto dir = std::filesystem::temp_directory_path() / ("microllm_bpe_trainer_" + name);
  std::filesystem::remove_all(dir);
  return dir;
}

// HF's course example. Split on letter runs and whitespace runs, so the words are
// hug x10, pug x5, pun x12, bun x4, hugs x5 (and " ", which has no pair). Pair counts:
//   u g 20 (hug, pug, hugs) · p u 17 · u n 16 · h u 15 · g s 5 · b u 4
// 1. u g (20)     -> h ug, p ug, h ug s; now h ug 15, p ug 5, ug s 5, p u 12, u n 16
// 2. u n (16)     -> p un, b un;          now p un 12, b un 4
// 3. h ug (15)    -> hug, hug s;          now hug s 5
// 4. p un (12)
// 5. p ug (5) and hug s (5) tie: the smaller (left id, right id) wins; 'p' is byte token
//    79 ('!' is 0), "hug" is token 258, so p ug first, then
// 6. hug s (5)
// 7. b un (4); then no pair is left.
const std::string kHugText =
    repeat_words({{"hug", 10}, {"pug", 5}, {"pun", 12}, {"bun", 4}, {"hugs", 5}});
const Merges kHugMerges = {{"u", "g"},  {"u", "n"},   {"h", "ug"}, {"p", "un"},
                           {"p", "ug"}, {"hug", "s"}, {"b", "un"}};

TEST(BpeTrainer, MergesDerivedByHand) {
  const BpeTrainerConfig config = config_with(256 + 7, R"(\p{L}+|\s+)");
  const BpeTrainingResult r = train_on(config, {kHugText});
  EXPECT_EQ(r.merges, kHugMerges);
  ASSERT_EQ(r.vocab.size(), 263u);
  EXPECT_EQ(r.vocab[256], "ug");
  EXPECT_EQ(r.vocab[258], "hug");
  EXPECT_EQ(r.vocab[262], "bun");
  EXPECT_FALSE(r.stats.stopped_early);
  EXPECT_EQ(r.stats.unique_words, 6);  // five words and " "
  EXPECT_EQ(r.stats.words, 36 + 36);   // each word is followed by " "

  const io::Tokenizer tok = load(r, config);
  EXPECT_EQ(tok.encode("hugs pug", false), (std::vector<int32_t>{261, 220, 260}));  // ' ' is 220
  EXPECT_EQ(tok.encode("bug", false), (std::vector<int32_t>{65, 256}));             // b ug
}

TEST(BpeTrainer, StopsWhenNoPairIsLeftOrBelowMinFrequency) {
  BpeTrainerConfig config = config_with(400, R"(\p{L}+|\s+)");
  BpeTrainingResult r = train_on(config, {kHugText});
  EXPECT_EQ(r.merges, kHugMerges);
  EXPECT_TRUE(r.stats.stopped_early);
  EXPECT_EQ(r.vocab.size(), 263u);

  config.min_frequency = 5;  // b un (4) is left out
  r = train_on(config, {kHugText});
  EXPECT_EQ(r.merges, Merges(kHugMerges.begin(), kHugMerges.end() - 1));
  EXPECT_TRUE(r.stats.stopped_early);

  config.vocab_size = 256 + 3;  // the vocabulary size ends it first
  r = train_on(config, {kHugText});
  EXPECT_EQ(r.merges, Merges(kHugMerges.begin(), kHugMerges.begin() + 3));
  EXPECT_FALSE(r.stats.stopped_early);
}

// "aaaa" holds the pair (a, a) three times but merges twice (left to right, no overlap):
// 1. a a (3 x 1)  -> aa aa; the counts follow HF's Word::merge: (aa, a) +1 then -1 = 0,
//                   (aa, aa) +1.
// 2. aa aa (1)    -> aaaa.
// "aaa" alone: 1. a a -> aa a; 2. aa a (1) -> aaa.
TEST(BpeTrainer, OverlappingPairsMergeLeftToRight) {
  const BpeTrainerConfig config = config_with(256 + 2, R"(\p{L}+|\s+)");
  EXPECT_EQ(train_on(config, {"aaaa"}).merges, (Merges{{"a", "a"}, {"aa", "aa"}}));
  EXPECT_EQ(train_on(config, {"aaa"}).merges, (Merges{{"a", "a"}, {"aa", "a"}}));
  const BpeTrainingResult r = train_on(config, {"aaaa"});
  EXPECT_EQ(load(r, config).encode("aaaaa", false), (std::vector<int32_t>{257, 64}));
}

// With the GPT-2 pattern a space starts the next word: " the" is one piece, "Ġthe" a token.
TEST(BpeTrainer, Gpt2PatternAndSpecialTokens) {
  BpeTrainerConfig config = config_with(256 + 3 + 2, *io::bpe_split_regex_preset("gpt2"));
  config.special_tokens = {"<|endoftext|>", "<|pad|>"};
  // "<|endoftext|>" is split out before counting: its pieces (< | end ...) are never seen.
  const BpeTrainingResult r =
      train_on(config, {"the the the<|endoftext|><|endoftext|><|endoftext|>the"});
  // Words: "the" x2 (first, and after the specials), " the" x2. Pairs: t h 4, h e 4, Ġ t 2.
  // 1. h e (4): it ties t h (4), and (h, e) = (71, 68) is smaller than (t, h) = (83, 71).
  // 2. t he (4): the change from "t h e" -> "t he" moved t h's count to (t, he).
  // 3. Ġ the (2).
  EXPECT_EQ(r.merges, (Merges{{"h", "e"}, {"t", "he"}, {"Ġ", "the"}}));
  const io::Tokenizer tok = load(r, config);
  EXPECT_EQ(tok.encode("the<|pad|> the<|endoftext|>", false),
            (std::vector<int32_t>{257, 260, 258, 259}));
  EXPECT_TRUE(tok.is_special(259));
  EXPECT_EQ(tok.vocab_size(), 261);
}

TEST(BpeTrainer, Deterministic) {
  BpeTrainerConfig config = config_with(600, *io::bpe_split_regex_preset("llama3"));
  config.special_tokens = {"<|endoftext|>"};
  std::string text;
  for (int i = 0; i < 200; ++i)
    text += "Line " + std::to_string(i * 7919 % 1000) + ": the quick brown fox's jumps over " +
            s8(u8"naïve 日本語 😀 ") + std::to_string(i) + "\n";
  const std::string a = io::bpe_tokenizer_json(train_on(config, {text, "x y z"}), config);
  const std::string b = io::bpe_tokenizer_json(train_on(config, {text, "x y z"}), config);
  EXPECT_EQ(a, b);
  // The order of the documents does not matter either: only the word counts do.
  EXPECT_EQ(a, io::bpe_tokenizer_json(train_on(config, {"x y z", text}), config));
  // train() leaves the counts untouched, so it can run twice.
  BpeTrainer trainer(config);
  trainer.add_text(text);
  EXPECT_EQ(trainer.train().merges, trainer.train().merges);
}

// Long documents are counted in pieces cut at "x\nWord"; the words must be the same as
// when the document is counted whole, for every preset pattern and any cut spacing.
TEST(BpeTrainer, ChunkedCountingSplitsLikeWholeDocuments) {
  std::string text;
  const std::vector<std::string> lines = {
      "Word one", "  indented", "\tTabbed",    "x.",       "'s contraction",
      "Next",     "",           "\r",          "after CR", s8(u8"Ünïcode ends\u3000"),
      "Letter",   "12345",      "trailing   ", "A",        s8(u8"日本語"),
      "b"};
  for (int i = 0; i < 50; ++i)
    for (size_t k = 0; k < lines.size(); ++k) text += lines[(k * 7 + i) % lines.size()] + "\n";
  for (const char* preset : {"gpt2", "llama3", "qwen2"}) {
    BpeTrainerConfig whole = config_with(2000, *io::bpe_split_regex_preset(preset));
    whole.chunk_bytes = 0;
    const BpeTrainingResult expected = train_on(whole, {text});
    for (const int64_t chunk : {1, 7, 64, 1000}) {
      BpeTrainerConfig cut = whole;
      cut.chunk_bytes = chunk;
      const BpeTrainingResult r = train_on(cut, {text});
      EXPECT_EQ(r.stats.words, expected.stats.words) << preset << " chunk " << chunk;
      EXPECT_EQ(r.stats.unique_words, expected.stats.unique_words) << preset << " " << chunk;
      EXPECT_EQ(r.merges, expected.merges) << preset << " chunk " << chunk;
    }
  }
}

TEST(BpeTrainer, WrittenJsonLayout) {
  BpeTrainerConfig config = config_with(256 + 7 + 1, R"(\p{L}+|\s+)");
  config.special_tokens = {"<|endoftext|>"};
  config.eos_token = "<|endoftext|>";
  const BpeTrainingResult r = train_on(config, {kHugText});
  const auto j = nlohmann::json::parse(io::bpe_tokenizer_json(r, config));
  const auto& vocab = j["model"]["vocab"];
  // Byte tokens in code point order of their characters, as GPT-2's own vocabulary.
  EXPECT_EQ(vocab["!"], 0);
  EXPECT_EQ(vocab["Ċ"], 198);  // '\n'
  EXPECT_EQ(vocab["Ġ"], 220);  // ' '
  EXPECT_EQ(vocab["ÿ"], 187);  // 0xFF
  EXPECT_EQ(vocab["bun"], 262);
  EXPECT_EQ(vocab.size(), 263u);
  EXPECT_EQ(j["model"]["merges"][0], "u g");
  EXPECT_EQ(j["model"]["merges"][6], "b un");
  EXPECT_TRUE(j["normalizer"].is_null());
  EXPECT_EQ(j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"], R"(\p{L}+|\s+)");
  EXPECT_EQ(j["pre_tokenizer"]["pretokenizers"][0]["behavior"], "Isolated");
  EXPECT_EQ(j["pre_tokenizer"]["pretokenizers"][1]["use_regex"], false);
  EXPECT_EQ(j["decoder"]["type"], "ByteLevel");
  EXPECT_EQ(j["added_tokens"][0]["id"], 263);
  EXPECT_EQ(j["added_tokens"][0]["special"], true);
  EXPECT_EQ(j["added_tokens"][0]["normalized"], false);
  const auto c = nlohmann::json::parse(io::bpe_tokenizer_config_json(r, config));
  EXPECT_EQ(c["eos_token"], "<|endoftext|>");
  EXPECT_TRUE(c["bos_token"].is_null());
  EXPECT_EQ(c["added_tokens_decoder"]["263"]["content"], "<|endoftext|>");
  EXPECT_EQ(load(r, config).config().eos_token, "<|endoftext|>");
}

TEST(BpeTrainer, RoundTripsMixedText) {
  BpeTrainerConfig config = config_with(1000, *io::bpe_split_regex_preset("qwen2"));
  config.special_tokens = {"<|im_start|>", "<|im_end|>"};
  const std::vector<std::string> samples = {
      "Hello, world! It's 2024-06-11 and I'm testing the tokenizer trainer.\r\n",
      s8(u8"Привет мир — Ελληνικά, 中文分词测试，日本語のテキスト 안녕하세요"),
      s8(u8"emoji 👨‍👩‍👧‍👦 👍🏽 🇯🇵 and combining e\u0301 a\u0308"),
      "code:\n\tdef f(x):\n        return x ** 2  # square\n\n\n",
      "<|im_start|>user\nhi<|im_end|>\n",
      std::string(300, ' ') + "digits 1234567890 3.14159",
  };
  std::string text;
  for (int i = 0; i < 20; ++i)
    for (const std::string& s : samples) text += s;
  const BpeTrainingResult r = train_on(config, {text});
  EXPECT_LE(r.vocab.size(), 998u);  // the text may run out of pairs first
  const auto first_special = static_cast<int32_t>(r.vocab.size());
  const io::Tokenizer tok = load(r, config);
  for (const std::string& s : samples) {
    const std::vector<int32_t> ids = tok.encode(s, false);
    EXPECT_EQ(tok.decode(ids, false), s);
    EXPECT_LT(ids.size(), s.size());  // the merges compress text they were trained on
  }
  for (const std::string& s :
       {std::string("unseen words: zebra quartz"), s8(u8"🫨 ꙮ 𠀀"), std::string("\x01\x7f")})
    EXPECT_EQ(tok.decode(tok.encode(s, false), false), s);
  EXPECT_EQ(tok.encode("<|im_end|>", false), (std::vector<int32_t>{first_special + 1}));
}

// Invalid UTF-8 is counted as encode() sees it: each ill-formed subsequence is U+FFFD.
TEST(BpeTrainer, InvalidUtf8IsRepairedLikeEncode) {
  const BpeTrainerConfig config = config_with(256 + 2, R"(\S+|\s+)");
  BpeTrainer trainer(config);
  trainer.add_text("\xff\xff\xff\xff \xc3");
  trainer.add_text("valid");
  const BpeTrainingResult r = trainer.train();
  EXPECT_EQ(r.stats.repaired_documents, 1);
  EXPECT_EQ(r.stats.documents, 2);
  // U+FFFD is EF BF BD (byte-level "ï¿½", ids 171 123 121), 5 times: 4, and the cut \xc3.
  // (EF, BF) and (BF, BD) both count 5; (123, 121) is the smaller pair, so BF BD goes first.
  EXPECT_EQ(r.merges, (Merges{{"¿", "½"}, {"ï", "¿½"}}));
  const io::Tokenizer tok = load(r, config);
  EXPECT_EQ(tok.encode("\xfe", false), (std::vector<int32_t>{257}));
  EXPECT_EQ(tok.decode(tok.encode("a\xff", false), false), s8(u8"a\uFFFD"));
}

TEST(BpeTrainer, NfcNormalizerAppliesBeforeCounting) {
  BpeTrainerConfig config = config_with(256 + 1, R"(\S+|\s+)");
  config.nfc = true;
  const BpeTrainingResult r = train_on(config, {s8(u8"e\u0301 e\u0301 e\u0301")});
  // NFC makes each "é" the two bytes C3 A9 (byte-level "Ã©"), merged first.
  EXPECT_EQ(r.merges, (Merges{{"Ã", "©"}}));
  const auto j = nlohmann::json::parse(io::bpe_tokenizer_json(r, config));
  EXPECT_EQ(j["normalizer"]["type"], "NFC");
  EXPECT_EQ(load(r, config).encode(s8(u8"e\u0301"), false), (std::vector<int32_t>{256}));
}

TEST(BpeTrainer, WritesFilesAndRefusesToOverwrite) {
  const auto dir = fresh_dir("write");
  BpeTrainerConfig config = config_with(300, R"(\p{L}+|\s+)");
  const BpeTrainingResult r = train_on(config, {kHugText});
  io::write_bpe_tokenizer(dir.string(), r, config, false);
  const io::Tokenizer tok = io::Tokenizer::from_file(dir.string());
  EXPECT_EQ(tok.encode("hugs", false), (std::vector<int32_t>{261}));
  EXPECT_FALSE(std::filesystem::exists(dir / "tokenizer.json.tmp"));
  EXPECT_TRUE(throws_error([&] { io::check_bpe_output_dir(dir.string(), false); },
                           "tokenizer train",
                           {dir.string(), "already holds tokenizer.json", "--overwrite"}));
  EXPECT_TRUE(throws_error([&] { io::write_bpe_tokenizer(dir.string(), r, config, false); },
                           "tokenizer train", {"already holds tokenizer.json"}));
  io::write_bpe_tokenizer(dir.string(), r, config, true);
  // --out naming a file.
  const auto file = dir / "tokenizer.json";
  EXPECT_TRUE(throws_error([&] { io::check_bpe_output_dir(file.string(), true); },
                           "tokenizer train", {"is not a directory"}));
  std::filesystem::remove_all(dir);
}

TEST(BpeTrainer, TrainsFromFiles) {
  const auto dir = fresh_dir("files");
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "a.txt") << kHugText;
  BpeTrainer trainer(config_with(263, R"(\p{L}+|\s+)"));
  trainer.add_file((dir / "a.txt").string());
  EXPECT_EQ(trainer.train().merges, kHugMerges);
  EXPECT_TRUE(throws_error([&] { trainer.add_file((dir / "missing.txt").string()); },
                           "tokenizer train", {"cannot open training file", "missing.txt"}));
  std::filesystem::remove_all(dir);
}

TEST(BpeTrainer, BadConfigurationsAreOneClearError) {
  const std::string regex = *io::bpe_split_regex_preset("gpt2");
  auto rejects = [](const BpeTrainerConfig& c, std::initializer_list<std::string_view> what) {
    return throws_error([&] { BpeTrainer trainer(c); }, "tokenizer train", what);
  };
  BpeTrainerConfig c = config_with(255, regex);
  EXPECT_TRUE(rejects(c, {"--vocab-size 255 is too small", "256 byte tokens", "at least 256"}));
  c = config_with(257, regex);
  c.special_tokens = {"<a>", "<b>"};
  EXPECT_TRUE(rejects(c, {"--vocab-size 257", "2 special token(s)", "at least 258"}));
  c = config_with(300, regex);
  c.special_tokens = {"<a>", ""};
  EXPECT_TRUE(rejects(c, {"special token is empty"}));
  c.special_tokens = {"<a>", "<a>"};
  EXPECT_TRUE(rejects(c, {"\"<a>\" is listed twice"}));
  c.special_tokens = {"\xff<a>"};
  EXPECT_TRUE(rejects(c, {"not valid UTF-8"}));
  c.special_tokens = {"Ġ"};
  EXPECT_TRUE(rejects(c, {"\"Ġ\" is the byte-level text of a byte token"}));
  c.special_tokens = {"<a>"};
  c.eos_token = "<b>";
  EXPECT_TRUE(rejects(c, {"\"<b>\" is not one of the special tokens"}));
  c = config_with(300, regex);
  c.min_frequency = -1;
  EXPECT_TRUE(rejects(c, {"--min-frequency must be >= 0"}));
  c = config_with(300, "");
  EXPECT_TRUE(rejects(c, {"split regex is empty"}));
  c = config_with(300, R"(\w+)");
  EXPECT_TRUE(rejects(c, {"--regex", "\\w"}));
  c = config_with(300, "(a");
  EXPECT_TRUE(rejects(c, {"--regex", "does not compile"}));
  EXPECT_FALSE(io::bpe_split_regex_preset("gpt3").has_value());
}

// A special token that the merges also produce as ordinary text would take that token's id
// in HF: the trainer refuses rather than write ids that differ between libraries.
TEST(BpeTrainer, SpecialTokenEqualToALearnedTokenIsRefused) {
  BpeTrainerConfig config = config_with(300, *io::bpe_split_regex_preset("gpt2"));
  config.special_tokens = {"Ġx"};  // the byte-level text of " x", which the merges learn
  BpeTrainer trainer(config);
  trainer.add_text(" x x x x");
  EXPECT_TRUE(throws_error([&] { trainer.train(); }, "tokenizer train",
                           {"special token \"Ġx\"", "learned or byte token"}));
}

}  // namespace
}  // namespace microllm::testing
