// TextStream: hold-back and stop strings over real tokenizers. Token boundaries are set by
// hand with tiny byte-level tokenizers (tests/io/tokenizer_test_util.h: byte b is id b,
// merges get ids 256, 257, ...), then a BPE tokenizer trained in the test on a small
// multilingual text is checked against an oracle built from Tokenizer::decode alone.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "core/expect_error.h"
#include "io/tokenizer_test_util.h"
#include "microllm/io/bpe_trainer.h"
#include "microllm/serve/text_stream.h"

namespace microllm::testing {
namespace {

using serve::TextStream;
using Ids = std::vector<int32_t>;
const std::string kFFFD = "\xEF\xBF\xBD";

Ids bytes_of(const std::string& text) {  // one byte token per byte
  Ids ids;
  for (const char c : text) ids.push_back(static_cast<unsigned char>(c));
  return ids;
}

// The pieces push() returns for each id, stopping at stopped().
std::vector<std::string> pieces(TextStream& s, const Ids& ids) {
  std::vector<std::string> out;
  for (const int32_t id : ids) {
    out.push_back(s.push(id));
    if (s.stopped()) break;
  }
  return out;
}

TEST(TextStream, WithoutStopStringsEveryCompleteCharacterIsEmittedAtOnce) {
  const io::Tokenizer t = tiny_tokenizer({});
  TextStream s(t, {});
  const std::string text = s8(u8"ab€c");  // € = E2 82 AC, one byte token each
  EXPECT_EQ(pieces(s, bytes_of(text)),
            (std::vector<std::string>{"a", "b", "", "", s8(u8"€"), "c"}));
  EXPECT_FALSE(s.stopped());
  EXPECT_EQ(s.stop_index(), -1);
  EXPECT_EQ(s.finish(), "");
}

TEST(TextStream, StopStringSpanningThreeTokensIsNeverEmitted) {
  const io::Tokenizer t = tiny_tokenizer({});
  TextStream s(t, {"END"});
  // E and N could start "END": held back; D completes it.
  EXPECT_EQ(pieces(s, bytes_of("abENDxyz")), (std::vector<std::string>{"a", "b", "", "", ""}));
  EXPECT_TRUE(s.stopped());
  EXPECT_EQ(s.stop_index(), 0);
  EXPECT_EQ(s.push('q'), "");  // ignored once stopped
  EXPECT_EQ(s.finish(), "");
}

TEST(TextStream, StopStringSpanningTwoTokensWithTextAroundIt) {
  TinySpec spec;
  spec.merges = {{"c", "E"}, {"N", "D"}, {"ND", "x"}};  // ids 256 "cE", 257 "ND", 258 "NDx"
  const io::Tokenizer t = tiny_tokenizer(spec);
  const Ids ids = t.encode("abcENDxy", false);
  ASSERT_EQ(ids, (Ids{'a', 'b', 256, 258, 'y'}));
  TextStream s(t, {"END"});
  // "cE": c is safe, E may start END; "NDx" completes END: nothing of it (nor x) comes out.
  EXPECT_EQ(pieces(s, ids), (std::vector<std::string>{"a", "b", "c", ""}));
  EXPECT_TRUE(s.stopped());
}

TEST(TextStream, StopStringAtTheVeryStart) {
  TinySpec spec;
  spec.merges = {{"a", "b"}, {"ab", "c"}};  // 256 "ab", 257 "abc"
  const io::Tokenizer t = tiny_tokenizer(spec);
  TextStream one(t, {"ab"});
  EXPECT_EQ(pieces(one, bytes_of("abc")), (std::vector<std::string>{"", ""}));
  EXPECT_TRUE(one.stopped());
  TextStream whole(t, {"ab"});
  EXPECT_EQ(whole.push(257), "");  // one token holds the stop string and more
  EXPECT_TRUE(whole.stopped());
  EXPECT_EQ(whole.finish(), "");
}

TEST(TextStream, OverlappingStopStringsCutAtTheEarliestStart) {
  const io::Tokenizer t = tiny_tokenizer({});
  {
    // "bc" completes while "abcd" is still possible: stop at once, before "b".
    TextStream s(t, {"abcd", "bc"});
    EXPECT_EQ(pieces(s, bytes_of("xabcd")), (std::vector<std::string>{"x", "", "", "a"}));
    EXPECT_EQ(s.stop_index(), 1);
  }
  {
    // A self-overlapping stop string: after "aaa" only the tail "aa" may still start "aab".
    TextStream s(t, {"aab"});
    EXPECT_EQ(pieces(s, bytes_of("aaab")), (std::vector<std::string>{"", "", "a", ""}));
    EXPECT_TRUE(s.stopped());
  }
  {
    // Both complete inside one token: "abcde" starts first, so nothing is emitted.
    TinySpec spec;
    spec.extra_tokens = {"abcdef"};
    const io::Tokenizer big = tiny_tokenizer(spec);
    const std::optional<int32_t> id = big.token_to_id(byte_level("abcdef"));
    ASSERT_TRUE(id.has_value());
    TextStream s(big, {"bcd", "abcde"});
    EXPECT_EQ(s.push('z'), "z");
    EXPECT_EQ(s.push(*id), "");
    EXPECT_EQ(s.stop_index(), 1);
  }
}

TEST(TextStream, MultiByteCharactersSplitOverTokens) {
  const io::Tokenizer t = tiny_tokenizer({});
  TextStream s(t, {s8(u8"€l"), "zz"});
  // The decoder holds E2 82; AC completes €, which may start "€l": held; 'l' completes it.
  EXPECT_EQ(pieces(s, bytes_of(s8(u8"h€llo"))), (std::vector<std::string>{"h", "", "", "", ""}));
  EXPECT_TRUE(s.stopped());
  EXPECT_EQ(s.stop_index(), 0);
  TextStream other(t, {s8(u8"€l")});
  // "€x" is not "€l": € is released together with x.
  EXPECT_EQ(pieces(other, bytes_of(s8(u8"€x"))),
            (std::vector<std::string>{"", "", "", s8(u8"€x")}));
  EXPECT_FALSE(other.stopped());
}

TEST(TextStream, HeldBackTextIsFlushedAtFinish) {
  const io::Tokenizer t = tiny_tokenizer({});
  TextStream s(t, {"END"});
  EXPECT_EQ(pieces(s, bytes_of("abEN")), (std::vector<std::string>{"a", "b", "", ""}));
  EXPECT_EQ(s.held_back_bytes(), 2u);
  EXPECT_EQ(s.finish(), "EN");
  EXPECT_FALSE(s.stopped());
  // An unfinished character at the end becomes U+FFFD, as decode() gives.
  TextStream u(t, {"END"});
  EXPECT_EQ(u.push('E'), "");
  EXPECT_EQ(u.push(0xE2), "");
  EXPECT_EQ(u.finish(), "E" + kFFFD);
  EXPECT_TRUE(throws_error([&] { u.push('a'); }, "text stream", {"after finish"}));
  EXPECT_TRUE(throws_error([&] { u.finish(); }, "text stream", {"twice"}));
}

TEST(TextStream, SpecialTokensAreSkippedByDefault) {
  TinySpec spec;
  spec.added_tokens = {added_token(256, "<|end|>", true)};
  const io::Tokenizer t = tiny_tokenizer(spec);
  TextStream skip(t, {"|"});
  EXPECT_EQ(skip.push('a'), "a");
  EXPECT_EQ(skip.push(256), "");  // decodes to nothing: no "|" to match
  EXPECT_FALSE(skip.stopped());
  TextStream keep(t, {"end"}, /*skip_special_tokens=*/false);
  EXPECT_EQ(keep.push('a'), "a");
  EXPECT_EQ(keep.push(256), "<|");
  EXPECT_TRUE(keep.stopped());
}

// A model's LM head is often wider than its tokenizer (Qwen2.5: 151,936 rows, 151,665
// tokens): an id with no token adds no text, as HF's decode skips it, and never throws.
TEST(TextStream, IdsWithoutATokenAddNoText) {
  const io::Tokenizer t = tiny_tokenizer({});
  ASSERT_EQ(t.vocab_size(), 256);
  EXPECT_FALSE(t.has_token(256));
  EXPECT_FALSE(t.has_token(-1));
  EXPECT_TRUE(t.has_token(255));
  TextStream s(t, {"ab"});
  EXPECT_EQ(pieces(s, Ids{'x', 256, 1 << 20, 'y'}), (std::vector<std::string>{"x", "", "", "y"}));
  EXPECT_EQ(s.push('a'), "");  // held: it may start "ab"
  EXPECT_EQ(s.push(300), "");  // no text: "a" is still held, the stop string still matches
  EXPECT_EQ(s.push('b'), "");
  EXPECT_TRUE(s.stopped());
}

TEST(TextStream, BadStopStringsAreErrors) {
  const io::Tokenizer t = tiny_tokenizer({});
  EXPECT_TRUE(throws_error(
      [&] {
        TextStream(t, {"ok", ""});
      },
      "text stream", {"stop string 1", "empty"}));
  EXPECT_TRUE(
      throws_error([&] { TextStream(t, {"\xC3"}); }, "text stream", {"stop string 0", "UTF-8"}));
}

// ---- a trained tokenizer against an oracle made of decode() and std::string only --------

// Length of the longest tail of `text` that is a proper prefix of `stop`, written as the
// definition says (every length tried).
size_t oracle_tail(const std::string& text, const std::string& stop) {
  size_t best = 0;
  for (size_t len = 1; len < stop.size() && len <= text.size(); ++len)
    if (text.compare(text.size() - len, len, stop, 0, len) == 0) best = len;
  return best;
}

struct Expected {
  std::string emitted;
  bool stopped = false;
};

// What must have come out after the first k ids: decode them; cut before the earliest stop
// string if one occurs; else drop the decoder's incomplete trailing character (one U+FFFD:
// the source text has none) and the longest tail that may still start a stop string.
Expected oracle(const io::Tokenizer& t, const Ids& ids, size_t k,
                const std::vector<std::string>& stops) {
  std::string full = t.decode(std::span<const int32_t>(ids.data(), k), true);
  size_t cut = std::string::npos;
  for (const std::string& s : stops) cut = std::min(cut, full.find(s));
  if (cut != std::string::npos) return {full.substr(0, cut), true};
  if (full.size() >= 3 && full.compare(full.size() - 3, 3, kFFFD) == 0)
    full.resize(full.size() - 3);
  size_t hold = 0;
  for (const std::string& s : stops) hold = std::max(hold, oracle_tail(full, s));
  return {full.substr(0, full.size() - hold), false};
}

TEST(TextStreamProperty, TrainedTokenizerMatchesTheDecodeOracleAfterEveryToken) {
  const std::string corpus =
      s8(u8"Le café du coin sert un thé glacé. Naïve façade, déjà vu; 你好世界, 你好朋友! "
         u8"Emoji 🙂🙃 and 🙂 again. The end is near: <END> then more text, END END. "
         u8"Stop here? STOP. Résumé — naïveté — 世界很大.");
  io::BpeTrainerConfig config;
  config.vocab_size = 256 + 120;
  config.split_regex = *io::bpe_split_regex_preset("gpt2");
  io::BpeTrainer trainer(config);
  for (int i = 0; i < 4; ++i) trainer.add_text(corpus);
  const io::BpeTrainingResult r = trainer.train();
  const io::Tokenizer t = io::Tokenizer::from_json(
      io::bpe_tokenizer_json(r, config), io::bpe_tokenizer_config_json(r, config), "trained.json");
  const Ids ids = t.encode(corpus, false);
  ASSERT_EQ(t.decode(ids, true), corpus);
  // Some token boundary must split a character (the prefix then decodes to a trailing
  // U+FFFD), or the multi-byte path would go untested.
  bool split = false;
  for (size_t k = 1; k < ids.size() && !split; ++k)
    split = t.decode(std::span<const int32_t>(ids.data(), k), true).ends_with(kFFFD);
  EXPECT_TRUE(split);

  std::mt19937 rng(5);
  int stopped_runs = 0;
  for (int trial = 0; trial < 300; ++trial) {
    // Stop strings: substrings of the text starting on a character (so they may match
    // across tokens), plus strings that never occur.
    std::vector<std::string> stops;
    const int count = static_cast<int>(rng() % 4);
    for (int i = 0; i < count; ++i) {
      if (rng() % 5 == 0) {
        stops.push_back(s8(u8"never-€") + std::to_string(i));
        continue;
      }
      size_t at = rng() % corpus.size();
      while ((static_cast<unsigned char>(corpus[at]) & 0xC0) == 0x80) --at;
      size_t end = std::min(corpus.size(), at + 1 + rng() % 8);
      while (end < corpus.size() && (static_cast<unsigned char>(corpus[end]) & 0xC0) == 0x80) ++end;
      stops.push_back(corpus.substr(at, end - at));
    }
    TextStream s(t, stops);
    std::string emitted;
    size_t k = 0;
    while (k < ids.size() && !s.stopped()) {
      const std::string piece = s.push(ids[k++]);
      ASSERT_TRUE(io::is_valid_utf8(piece));
      emitted += piece;
      const Expected want = oracle(t, ids, k, stops);
      ASSERT_EQ(emitted, want.emitted) << "trial " << trial << " after " << k << " tokens";
      ASSERT_EQ(s.stopped(), want.stopped) << "trial " << trial << " after " << k << " tokens";
    }
    emitted += s.finish();
    // The invariant: everything emitted = decode(ids pushed) cut before the first stop.
    std::string full = t.decode(std::span<const int32_t>(ids.data(), k), true);
    size_t cut = std::string::npos;
    for (const std::string& stop : stops) cut = std::min(cut, full.find(stop));
    EXPECT_EQ(emitted, full.substr(0, cut)) << "trial " << trial;
    stopped_runs += s.stopped();
  }
  EXPECT_GT(stopped_runs, 100);  // most trials did hit a stop string
}

}  // namespace
}  // namespace microllm::testing
