// Small byte-level BPE tokenizers written out as tokenizer.json for the tokenizer tests.
//
// The vocabulary holds the 256 byte tokens with id = byte value (so encode("a") is [97]),
// then each merge's result with ids 256, 257, ... in merge order, then `extra_tokens`. The
// byte-to-unicode map is written here independently of the library's (GPT-2 encoder.py),
// and pinned on a few known values by the tests.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "microllm/io/tokenizer.h"

namespace microllm::testing {

// GPT-2's bytes_to_unicode(), as UTF-8 text per byte.
inline std::string byte_char(unsigned char b) {
  int n = 0;
  int code = b;
  const bool direct = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
  if (!direct) {
    for (int x = 0; x < b; ++x) {
      const bool d = (x >= '!' && x <= '~') || (x >= 0xA1 && x <= 0xAC) || (x >= 0xAE);
      if (!d) ++n;
    }
    code = 256 + n;
  }
  std::string out;
  if (code < 0x80) {
    out += static_cast<char>(code);
  } else {
    out += static_cast<char>(0xC0 | (code >> 6));
    out += static_cast<char>(0x80 | (code & 0x3F));
  }
  return out;
}

// Raw bytes -> their byte-level text.
inline std::string byte_level(std::string_view raw) {
  std::string out;
  for (const char c : raw) out += byte_char(static_cast<unsigned char>(c));
  return out;
}

inline nlohmann::json byte_level_pre_tokenizer(bool add_prefix_space = false,
                                               bool use_regex = false) {
  return {{"type", "ByteLevel"},
          {"add_prefix_space", add_prefix_space},
          {"trim_offsets", false},
          {"use_regex", use_regex}};
}

inline nlohmann::json split_step(const std::string& regex, const std::string& behavior = "Isolated",
                                 bool invert = false) {
  return {{"type", "Split"},
          {"pattern", {{"Regex", regex}}},
          {"behavior", behavior},
          {"invert", invert}};
}

inline nlohmann::json sequence_pre_tokenizer(std::vector<nlohmann::json> steps) {
  steps.push_back(byte_level_pre_tokenizer());
  return {{"type", "Sequence"}, {"pretokenizers", steps}};
}

inline nlohmann::json added_token(int id, const std::string& content, bool special,
                                  bool normalized = false, bool single_word = false,
                                  bool lstrip = false, bool rstrip = false) {
  return {{"id", id},          {"content", content}, {"single_word", single_word},
          {"lstrip", lstrip},  {"rstrip", rstrip},   {"normalized", normalized},
          {"special", special}};
}

struct TinySpec {
  std::vector<std::pair<std::string, std::string>> merges;  // raw text pairs, in rank order
  std::vector<std::string> extra_tokens;                    // raw text tokens without merges
  std::vector<unsigned char> missing_bytes;                 // bytes left out of the vocabulary
  nlohmann::json normalizer = nullptr;
  nlohmann::json pre_tokenizer = byte_level_pre_tokenizer();
  nlohmann::json post_processor = nullptr;
  nlohmann::json decoder = {{"type", "ByteLevel"},
                            {"add_prefix_space", false},
                            {"trim_offsets", false},
                            {"use_regex", false}};
  nlohmann::json added_tokens = nlohmann::json::array();
  nlohmann::json model_extra = nlohmann::json::object();  // merged into "model"
  bool merges_as_strings = false;                         // "a b" instead of ["a", "b"]
};

inline nlohmann::json tiny_tokenizer_json(const TinySpec& spec) {
  nlohmann::json vocab = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) {
    bool missing = false;
    for (const unsigned char m : spec.missing_bytes) missing |= m == b;
    if (!missing) vocab[byte_char(static_cast<unsigned char>(b))] = b;
  }
  int next = 256;
  nlohmann::json merges = nlohmann::json::array();
  for (const auto& [left, right] : spec.merges) {
    const std::string l = byte_level(left), r = byte_level(right);
    if (spec.merges_as_strings)
      merges.push_back(l + " " + r);
    else
      merges.push_back({l, r});
    if (!vocab.contains(l + r)) vocab[l + r] = next++;
  }
  for (const std::string& t : spec.extra_tokens)
    if (!vocab.contains(byte_level(t))) vocab[byte_level(t)] = next++;
  nlohmann::json model = {{"type", "BPE"},
                          {"dropout", nullptr},
                          {"unk_token", nullptr},
                          {"continuing_subword_prefix", ""},
                          {"end_of_word_suffix", ""},
                          {"fuse_unk", false},
                          {"byte_fallback", false},
                          {"ignore_merges", false},
                          {"vocab", vocab},
                          {"merges", merges}};
  model.update(spec.model_extra);
  return {{"version", "1.0"},
          {"truncation", nullptr},
          {"padding", nullptr},
          {"added_tokens", spec.added_tokens},
          {"normalizer", spec.normalizer},
          {"pre_tokenizer", spec.pre_tokenizer},
          {"post_processor", spec.post_processor},
          {"decoder", spec.decoder},
          {"model", model}};
}

inline io::Tokenizer tiny_tokenizer(const TinySpec& spec) {
  return io::Tokenizer::from_json(tiny_tokenizer_json(spec).dump(), "", "tiny-tokenizer.json");
}

// Unicode escapes in test strings stay readable: u8"" literals as std::string.
inline std::string s8(const char8_t* text) { return reinterpret_cast<const char*>(text); }

}  // namespace microllm::testing
