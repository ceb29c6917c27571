// Added tokens, as HF's AddedVocabulary matches them: before pre-tokenization, leftmost-
// longest, with single_word / lstrip / rstrip / normalized; special ones skipped on decode.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "io/tokenizer_test_util.h"

namespace microllm::testing {
namespace {

using Ids = std::vector<int32_t>;
using Pieces = std::vector<std::string>;

// Bytes only, plus the given added tokens (ids 256...).
io::Tokenizer with_added(nlohmann::json added, nlohmann::json normalizer = nullptr) {
  TinySpec spec;
  spec.added_tokens = std::move(added);
  spec.normalizer = std::move(normalizer);
  return tiny_tokenizer(spec);
}

TEST(TokenizerAddedTokens, SpecialAndNonSpecialTokensSplitTheText) {
  const io::Tokenizer t =
      with_added({added_token(256, "<|x|>", true), added_token(257, "<y>", false)});
  EXPECT_EQ(t.encode("a<|x|>b<y>c", false), (Ids{'a', 256, 'b', 257, 'c'}));
  EXPECT_EQ(t.encode("<|x|><|x|>", false), (Ids{256, 256}));
  EXPECT_EQ(t.encode("<|x|", false), (Ids{'<', '|', 'x', '|'}));  // a look-alike is plain text
  EXPECT_TRUE(t.is_special(256));
  EXPECT_FALSE(t.is_special(257));
  EXPECT_FALSE(t.is_special('a'));
  EXPECT_EQ(t.token_to_id("<|x|>"), 256);
  EXPECT_EQ(t.vocab_size(), 258);
}

TEST(TokenizerAddedTokens, LeftmostThenLongestMatchWins) {
  const io::Tokenizer t = with_added({added_token(256, "ab", false), added_token(257, "abc", false),
                                      added_token(258, "bcd", false)});
  EXPECT_EQ(t.encode("abcd", false), (Ids{257, 'd'}));  // "abc" beats "ab" at 0; "bcd" starts later
  EXPECT_EQ(t.encode("xbcd", false), (Ids{'x', 258}));
  EXPECT_EQ(t.encode("abab", false), (Ids{256, 256}));
}

TEST(TokenizerAddedTokens, SingleWordMatchesOnlyOutsideWords) {
  const io::Tokenizer t = with_added({added_token(256, "ab", false, false, /*single_word=*/true)});
  EXPECT_EQ(t.encode("ab cd", false), (Ids{256, ' ', 'c', 'd'}));
  EXPECT_EQ(t.encode("ab!", false), (Ids{256, '!'}));
  EXPECT_EQ(t.encode("xab", false), (Ids{'x', 'a', 'b'}));
  EXPECT_EQ(t.encode("ab_", false), (Ids{'a', 'b', '_'}));                // '_' is a word character
  EXPECT_EQ(t.encode(s8(u8"éab"), false), (Ids{0xC3, 0xA9, 'a', 'b'}));   // so is 'é'
  EXPECT_EQ(t.encode(s8(u8"—ab"), false), (Ids{0xE2, 0x80, 0x94, 256}));  // an em dash is not
}

TEST(TokenizerAddedTokens, LstripAndRstripAbsorbWhitespace) {
  const io::Tokenizer left =
      with_added({added_token(256, "<m>", true, false, false, /*lstrip=*/true)});
  EXPECT_EQ(left.encode("a  <m>  b", false), (Ids{'a', 256, ' ', ' ', 'b'}));
  EXPECT_EQ(left.pre_tokenize("a \t<m>b"), (Pieces{"a", " \t<m>", "b"}));
  EXPECT_EQ(left.encode("<m> <m>", false), (Ids{256, 256}));  // never past the previous match
  const io::Tokenizer right =
      with_added({added_token(256, "<m>", true, false, false, false, /*rstrip=*/true)});
  EXPECT_EQ(right.encode("a  <m>  b", false), (Ids{'a', ' ', ' ', 256, 'b'}));
  EXPECT_EQ(right.pre_tokenize(s8(u8"<m>\u3000\n b")), (Pieces{s8(u8"<m>\u3000\n "), "b"}));
}

TEST(TokenizerAddedTokens, NormalizedTokensMatchTheNormalizedText) {
  const nlohmann::json nfc = {{"type", "NFC"}};
  // U+01D8 is outside the byte alphabet, so the token is new (id 256) rather than a byte's.
  const std::string composed = s8(u8"\u01d8"), decomposed = s8(u8"u\u0308\u0301");
  // normalized=true: found after NFC, so the decomposed spelling matches too.
  const io::Tokenizer norm =
      with_added({added_token(256, composed, false, /*normalized=*/true)}, nfc);
  EXPECT_EQ(norm.encode(decomposed + "x", false), (Ids{256, 'x'}));
  EXPECT_EQ(norm.encode(composed, false), (Ids{256}));
  // normalized=false: only the raw spelling matches; NFC happens after the split.
  const io::Tokenizer raw =
      with_added({added_token(256, decomposed, false, /*normalized=*/false)}, nfc);
  EXPECT_EQ(raw.encode(decomposed, false), (Ids{256}));
  EXPECT_EQ(raw.encode(composed, false), (Ids{0xC7, 0x98}));
  // Raw tokens are split out before NFC, which then runs on each piece between them: NFC
  // of the whole text would have merged the token's 'e' with the accent.
  const io::Tokenizer special = with_added({added_token(256, "xe", true)}, nfc);
  EXPECT_EQ(special.encode(s8(u8"xe\u0301"), false), (Ids{256, 0xCC, 0x81}));
}

TEST(TokenizerAddedTokens, DecodeSkipsOnlySpecialTokensWhenAsked) {
  const io::Tokenizer t =
      with_added({added_token(256, "<|x|>", true), added_token(257, "<y>", false)});
  const Ids ids = t.encode("a<|x|>b<y>", false);
  EXPECT_EQ(t.decode(ids, false), "a<|x|>b<y>");
  EXPECT_EQ(t.decode(ids, true), "ab<y>");
}

TEST(TokenizerAddedTokens, TokenOutsideTheByteAlphabetDecodesToItsOwnText) {
  const io::Tokenizer t =
      with_added({added_token(256, s8(u8"日本"), false), added_token(257, "a b", false)});
  EXPECT_EQ(t.decode(Ids{256, 'x', 257}, false), s8(u8"日本xa b"));
}

TEST(TokenizerAddedTokens, IdsAreAssignedAsHuggingFaceAssignsThem) {
  // "é" (U+00E9) is also the byte-level token of byte 0xE9, so it keeps that id.
  EXPECT_EQ(with_added({added_token(256, s8(u8"\u00e9"), false)}).token_to_id(s8(u8"\u00e9")),
            0xE9);
  // A content already in the vocabulary keeps its vocabulary id; a new one takes the next id
  // after the model vocabulary, whatever the file says (HF's AddedVocabulary::add_tokens).
  const io::Tokenizer t = with_added({added_token(5, "a", true), added_token(9999, "<new>", true)});
  EXPECT_EQ(t.token_to_id("a"), 'a');
  EXPECT_EQ(t.token_to_id("<new>"), 256);
  EXPECT_EQ(t.encode("<new>a", false), (Ids{256, 'a'}));
  EXPECT_TRUE(t.is_special('a'));
  EXPECT_EQ(t.decode(Ids{'a', 'b'}, true), "b");
}

TEST(TokenizerPostProcessor, TemplateProcessingAddsSpecialsOnlyWhenAsked) {
  TinySpec spec;
  spec.added_tokens = {added_token(256, "<bos>", true), added_token(257, "<eos>", true)};
  auto special = [](const std::string& name, int id) {
    return nlohmann::json{{"id", name}, {"ids", {id}}, {"tokens", {name}}};
  };
  const nlohmann::json bos_a_eos = {
      {"type", "TemplateProcessing"},
      {"single",
       {{{"SpecialToken", {{"id", "<bos>"}, {"type_id", 0}}}},
        {{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
        {{"SpecialToken", {{"id", "<eos>"}, {"type_id", 0}}}}}},
      {"pair", nlohmann::json::array()},
      {"special_tokens", {{"<bos>", special("<bos>", 256)}, {"<eos>", special("<eos>", 257)}}}};
  spec.post_processor = {
      {"type", "Sequence"},
      {"processors", {{{"type", "ByteLevel"}, {"add_prefix_space", false}}, bos_a_eos}}};
  const io::Tokenizer t = tiny_tokenizer(spec);
  EXPECT_EQ(t.encode("hi", false), (Ids{'h', 'i'}));
  EXPECT_EQ(t.encode("hi", true), (Ids{256, 'h', 'i', 257}));
  EXPECT_EQ(t.encode("", true), (Ids{256, 257}));
  EXPECT_EQ(t.decode(t.encode("hi", true), true), "hi");
}

}  // namespace
}  // namespace microllm::testing
