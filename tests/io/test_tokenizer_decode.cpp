// Decoding and invalid UTF-8: U+FFFD per maximal subpart (Unicode §3.9) on input and
// output, the StreamingDecoder on characters split across tokens, and the null decoder.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "core/expect_error.h"
#include "io/tokenizer_test_util.h"

namespace microllm::testing {
namespace {

using Ids = std::vector<int32_t>;
const std::string kFFFD = "\xEF\xBF\xBD";

std::string repeat(const std::string& s, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) out += s;
  return out;
}

TEST(TokenizerUtf8, ValidityFollowsTableThreeSeven) {
  EXPECT_TRUE(io::is_valid_utf8(""));
  EXPECT_TRUE(io::is_valid_utf8(s8(u8"aé€😀\U0010FFFF")));
  for (const char* bad :
       {"\x80", "\xC0\xAF", "\xC3", "\xE0\x80\xAF", "\xED\xA0\x80", "\xF0\x80\x80\x80",
        "\xF4\x90\x80\x80", "\xF5\x80\x80\x80", "\xFF", "a\xE2\x82"})
    EXPECT_FALSE(io::is_valid_utf8(bad)) << bad;
}

TEST(TokenizerUtf8, EachMaximalSubpartBecomesOneReplacementCharacter) {
  // The Unicode Standard's own example (§3.9, Table 3-8).
  EXPECT_EQ(io::to_valid_utf8("\x61\xF1\x80\x80\xE1\x80\xC2\x62\x80\x63\x80\xBF\x64"),
            "a" + repeat(kFFFD, 3) + "b" + kFFFD + "c" + repeat(kFFFD, 2) + "d");
  EXPECT_EQ(io::to_valid_utf8("\xED\xA0\x80"),
            repeat(kFFFD, 3));  // a surrogate: ED alone is a subpart
  EXPECT_EQ(io::to_valid_utf8("\xF0\x80\x80"), repeat(kFFFD, 3));      // overlong 4-byte start
  EXPECT_EQ(io::to_valid_utf8("\xF4\x90\x80\x80"), repeat(kFFFD, 4));  // above U+10FFFF
  EXPECT_EQ(io::to_valid_utf8("\xC0\xAF"), repeat(kFFFD, 2));
  EXPECT_EQ(io::to_valid_utf8("x\xF0\x9F\x98"), "x" + kFFFD);  // truncated at the end: one
  EXPECT_EQ(io::to_valid_utf8("\xE2\x82 \xE2\x82\xAC"), kFFFD + s8(u8" €"));
}

TEST(TokenizerUtf8, InvalidInputEncodesAsItsRepair) {
  const io::Tokenizer t = tiny_tokenizer({});
  const std::string bad = "ab\xC3(\xF0\x9F\x98";
  EXPECT_EQ(t.encode(bad, false), t.encode(io::to_valid_utf8(bad), false));
  EXPECT_EQ(t.encode(bad, false), (Ids{'a', 'b', 0xEF, 0xBF, 0xBD, '(', 0xEF, 0xBF, 0xBD}));
  EXPECT_EQ(t.pre_tokenize("\xFF"), (std::vector<std::string>{kFFFD}));
}

TEST(TokenizerDecode, IllFormedBytesFromTokensBecomeReplacementCharacters) {
  const io::Tokenizer t = tiny_tokenizer({});
  EXPECT_EQ(t.decode(Ids{'a', 0xC3, 'b'}, false), "a" + kFFFD + "b");
  EXPECT_EQ(t.decode(Ids{0xF0, 0x9F, 0x98}, false), kFFFD);
  EXPECT_EQ(t.decode(Ids{}, false), "");
}

TEST(TokenizerStreamingDecoder, HoldsBackASplitCharacterUntilComplete) {
  const io::Tokenizer t = tiny_tokenizer({});
  io::StreamingDecoder d(t);
  EXPECT_EQ(d.push('a'), "a");
  EXPECT_EQ(d.push(0xC3), "");  // first byte of é
  EXPECT_EQ(d.pending_bytes(), 1u);
  EXPECT_EQ(d.push(0xA9), s8(u8"é"));
  EXPECT_EQ(d.push(0xF0), "");  // 😀 = F0 9F 98 80, one byte per token
  EXPECT_EQ(d.push(0x9F), "");
  EXPECT_EQ(d.push(0x98), "");
  EXPECT_EQ(d.push(0x80), s8(u8"😀"));
  EXPECT_EQ(d.finish(), "");
}

TEST(TokenizerStreamingDecoder, MultiByteTokensSplittingCharactersBothWays) {
  TinySpec spec;
  spec.merges = {{"\xE4", "\xBD"}, {"\xA0", "\xE5"}};  // 你 = E4 BD A0, 好 = E5 A5 BD
  const io::Tokenizer t = tiny_tokenizer(spec);
  const Ids ids = t.encode(s8(u8"你好"), false);
  ASSERT_EQ(ids, (Ids{256, 257, 0xA5, 0xBD}));  // tokens cut through both characters
  io::StreamingDecoder d(t);
  EXPECT_EQ(d.push(ids[0]), "");
  EXPECT_EQ(d.push(ids[1]), s8(u8"你"));
  EXPECT_EQ(d.push(ids[2]), "");
  EXPECT_EQ(d.push(ids[3]), s8(u8"好"));
}

TEST(TokenizerStreamingDecoder, InvalidBytesAreReplacedAsSoonAsTheyCannotComplete) {
  const io::Tokenizer t = tiny_tokenizer({});
  io::StreamingDecoder d(t);
  EXPECT_EQ(d.push(0xC3), "");
  EXPECT_EQ(d.push('a'), kFFFD + "a");  // C3 followed by 'a' can never complete
  EXPECT_EQ(d.push(0xFF), kFFFD);       // FF never starts a character
  EXPECT_EQ(d.push(0xE2), "");
  EXPECT_EQ(d.push(0x82), "");
  EXPECT_EQ(d.finish(), kFFFD);  // an unfinished character at the end: one U+FFFD
  EXPECT_EQ(d.push('b'), "b");   // finish() reset the decoder
}

TEST(TokenizerStreamingDecoder, ConcatenationEqualsDecodeOnRandomBytes) {
  TinySpec spec;
  spec.merges = {{"\xC3", "\xA9"}, {"\xE2", "\x82"}, {"\xF0", "\x9F"}, {"\x98", "\x80"}};
  spec.added_tokens = {added_token(260, "<s>", true)};
  const io::Tokenizer t = tiny_tokenizer(spec);
  std::mt19937 rng(7);
  const std::vector<int32_t> pool = {'a',  ' ',  0x80, 0x98, 0x9F, 0xA9, 0xBF, 0xC3, 0xE2,
                                     0xED, 0xF0, 0xF4, 0xFF, 256,  257,  258,  259,  260};
  for (int trial = 0; trial < 2000; ++trial) {
    Ids ids(rng() % 12);
    for (int32_t& id : ids) id = pool[rng() % pool.size()];
    for (const bool skip : {false, true}) {
      io::StreamingDecoder d(t, skip);
      std::string streamed;
      for (const int32_t id : ids) streamed += d.push(id);
      streamed += d.finish();
      ASSERT_EQ(streamed, t.decode(ids, skip)) << "trial " << trial;
      ASSERT_TRUE(io::is_valid_utf8(streamed));
    }
  }
}

TEST(TokenizerDecode, WithoutDecoderTokensAreJoinedBySpaces) {
  TinySpec spec;
  spec.decoder = nullptr;
  const io::Tokenizer t = tiny_tokenizer(spec);
  EXPECT_EQ(t.decode(Ids{'a', 'b', ' '}, false), s8(u8"a b Ġ"));  // HF: tokens.join(" ")
  io::StreamingDecoder d(t);
  std::string streamed = d.push('a');
  streamed += d.push('b');
  EXPECT_EQ(streamed + d.finish(), "a b");
}

TEST(TokenizerDecode, UnknownIdsAreErrors) {
  const io::Tokenizer t = tiny_tokenizer({});
  EXPECT_TRUE(throws_error(
      [&] {
        t.decode(Ids{'a', 5000}, false);
      },
      "tokenizer", {"id 5000", "tiny-tokenizer.json", "256 ids"}));
  EXPECT_TRUE(throws_error([&] { t.decode(Ids{-1}, false); }, "tokenizer", {"id -1"}));
  EXPECT_TRUE(throws_error([&] { io::StreamingDecoder(t).push(256); }, "tokenizer", {"id 256"}));
  EXPECT_TRUE(throws_error([&] { t.id_to_token(300); }, "tokenizer", {"id 300"}));
  EXPECT_FALSE(t.is_special(5000));
}

}  // namespace
}  // namespace microllm::testing
