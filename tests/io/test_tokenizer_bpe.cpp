// The BPE model and the byte-level map: merges by rank, ties, ignore_merges, unknown bytes,
// the per-word cache, both merge formats, and GPT-2's byte-to-unicode characters.
#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

#include "io/tokenizer_test_util.h"

namespace microllm::testing {
namespace {

using Ids = std::vector<int32_t>;

TEST(TokenizerByteLevel, GptTwoAlphabetKnownValues) {
  EXPECT_EQ(byte_char(' '), s8(u8"Ġ"));   // U+0120
  EXPECT_EQ(byte_char('\n'), s8(u8"Ċ"));  // U+010A
  EXPECT_EQ(byte_char(0), s8(u8"Ā"));     // U+0100: the first remapped byte
  EXPECT_EQ(byte_char(0xAD), s8(u8"Ń"));  // U+0143: the last remapped byte (soft hyphen)
  EXPECT_EQ(byte_char('A'), "A");
  EXPECT_EQ(byte_char(0xFF), s8(u8"ÿ"));
}

TEST(TokenizerByteLevel, EveryByteIsItsOwnTokenAndDecodesBack) {
  const io::Tokenizer t = tiny_tokenizer({});
  EXPECT_EQ(t.vocab_size(), 256);
  EXPECT_EQ(t.encode(" \n", false), (Ids{32, 10}));
  EXPECT_EQ(t.id_to_token(32), s8(u8"Ġ"));
  std::string all;
  Ids ids;
  for (int b = 0; b < 256; ++b) ids.push_back(b);
  for (int b = 0; b < 128; ++b) all += static_cast<char>(b);
  // The 128 ASCII bytes round-trip exactly; alone, bytes 0x80.. are ill-formed UTF-8.
  EXPECT_EQ(t.decode(Ids(ids.begin(), ids.begin() + 128), false), all);
  EXPECT_EQ(t.encode(s8(u8"é"), false), (Ids{0xC3, 0xA9}));
  EXPECT_EQ(t.decode(Ids{0xC3, 0xA9}, false), s8(u8"é"));
}

TEST(TokenizerBpe, MergesApplyInRankOrder) {
  TinySpec spec;
  spec.merges = {{"a", "b"}, {"b", "c"}};
  EXPECT_EQ(tiny_tokenizer(spec).encode("abc", false), (Ids{256, 'c'}));  // ab has the lower rank
  spec.merges = {{"b", "c"}, {"a", "b"}};
  EXPECT_EQ(tiny_tokenizer(spec).encode("abc", false), (Ids{'a', 256}));  // now bc does
}

TEST(TokenizerBpe, EqualRanksMergeLeftmostFirst) {
  TinySpec spec;
  spec.merges = {{"a", "a"}};
  const io::Tokenizer t = tiny_tokenizer(spec);
  EXPECT_EQ(t.encode("aaa", false), (Ids{256, 'a'}));
  EXPECT_EQ(t.encode("aaaa", false), (Ids{256, 256}));
  EXPECT_EQ(t.encode("aaaaa", false), (Ids{256, 256, 'a'}));
}

TEST(TokenizerBpe, MergedTokensMergeFurther) {
  TinySpec spec;
  spec.merges = {{"a", "b"}, {"ab", "c"}, {"c", "d"}, {"abc", "d"}};
  const io::Tokenizer t = tiny_tokenizer(spec);  // ids: ab 256, abc 257, cd 258, abcd 259
  EXPECT_EQ(t.encode("abc", false), (Ids{257}));
  EXPECT_EQ(t.encode("abcd", false), (Ids{259}));  // ab, then abc (rank 1) before cd (rank 2)
  EXPECT_EQ(t.encode("cdab", false), (Ids{258, 256}));
}

TEST(TokenizerBpe, MergesAsStringsEqualMergesAsPairs) {
  TinySpec spec;
  spec.merges = {{"h", "e"}, {"l", "l"}, {"he", "ll"}, {"hell", "o"}};
  const Ids pairs = tiny_tokenizer(spec).encode("hello yellow", false);
  spec.merges_as_strings = true;
  EXPECT_EQ(tiny_tokenizer(spec).encode("hello yellow", false), pairs);
  EXPECT_EQ(pairs.front(), 259);  // "hello"
}

TEST(TokenizerBpe, IgnoreMergesTakesAVocabularyWordWhole) {
  TinySpec spec;
  spec.merges = {{"a", "b"}};
  spec.extra_tokens = {"abc"};  // id 257, unreachable through merges
  EXPECT_EQ(tiny_tokenizer(spec).encode("abc", false), (Ids{256, 'c'}));
  spec.model_extra = {{"ignore_merges", true}};
  const io::Tokenizer t = tiny_tokenizer(spec);
  EXPECT_EQ(t.encode("abc", false), (Ids{257}));
  EXPECT_EQ(t.encode("abcc", false),
            (Ids{256, 'c', 'c'}));  // not a vocabulary word: merges as usual
}

TEST(TokenizerBpe, ByteMissingFromTheVocabularyIsDroppedWithoutUnkToken) {
  TinySpec spec;
  spec.missing_bytes = {'z'};
  EXPECT_EQ(tiny_tokenizer(spec).encode("aza", false), (Ids{'a', 'a'}));  // as HF: no unk, no token
}

TEST(TokenizerBpe, UnknownBytesBecomeTheUnkTokenFusedOrNot) {
  TinySpec spec;
  spec.missing_bytes = {'z'};
  spec.extra_tokens = {"<unk>"};  // id 256
  spec.model_extra = {{"unk_token", byte_level("<unk>")}};
  EXPECT_EQ(tiny_tokenizer(spec).encode("azza", false), (Ids{'a', 256, 256, 'a'}));
  spec.model_extra["fuse_unk"] = true;
  EXPECT_EQ(tiny_tokenizer(spec).encode("azza", false), (Ids{'a', 256, 'a'}));
}

TEST(TokenizerBpe, CachedWordsEncodeLikeFreshOnes) {
  TinySpec spec;
  spec.merges = {{"a", "b"}, {"ab", "c"}, {"b", "c"}};
  spec.pre_tokenizer = sequence_pre_tokenizer({split_step(" ", "Removed")});
  const io::Tokenizer warm = tiny_tokenizer(spec);
  // More distinct words than the cache holds, twice over; a fresh tokenizer agrees.
  std::string text;
  for (int i = 0; i < 140000; ++i) text += "abc" + std::to_string(i) + "bc ";
  const Ids first = warm.encode(text, false);
  const Ids second = warm.encode(text, false);
  EXPECT_EQ(first, second);
  EXPECT_EQ(tiny_tokenizer(spec).encode("abc7bc", false), (Ids{257, '7', 258}));
  EXPECT_EQ(Ids(first.begin(), first.begin() + 3), (Ids{257, '0', 258}));
}

TEST(TokenizerBpe, LongWordMergesLikeShortOnes) {
  TinySpec spec;
  spec.merges = {{"a", "a"}, {"aa", "aa"}};
  const io::Tokenizer t = tiny_tokenizer(spec);
  const Ids ids = t.encode(std::string(4001, 'a'), false);  // 1000 x "aaaa" + "a"
  ASSERT_EQ(ids.size(), 1001u);
  EXPECT_EQ(ids.front(), 257);
  EXPECT_EQ(ids.back(), 'a');
}

TEST(TokenizerBpe, ConcurrentEncodesAgreeWithSerialOnes) {
  // One tokenizer shared by threads: the word cache and the regex state are thread-safe.
  TinySpec spec;
  spec.merges = {{"t", "h"}, {"th", "e"}, {" ", "the"}, {"e", "r"}, {"a", "n"}};
  spec.pre_tokenizer = byte_level_pre_tokenizer(false, true);
  const io::Tokenizer t = tiny_tokenizer(spec);
  std::vector<std::string> texts;
  for (int i = 0; i < 200; ++i)
    texts.push_back("the other " + std::to_string(i) + " and there then " + std::to_string(i * 7));
  std::vector<Ids> serial;
  for (const std::string& text : texts) serial.push_back(t.encode(text, false));
  std::vector<int> mismatches(4, 0);
  std::vector<std::thread> threads;
  for (int k = 0; k < 4; ++k)
    threads.emplace_back([&, k] {
      for (int round = 0; round < 20; ++round)
        for (size_t i = 0; i < texts.size(); ++i)
          mismatches[k] += t.encode(texts[i], false) != serial[i];
    });
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(mismatches, (std::vector<int>{0, 0, 0, 0}));
}

}  // namespace
}  // namespace microllm::testing
