// Byte-level BPE tokenizer read from a Hugging Face `tokenizer.json` (+ `tokenizer_config.json`),
// producing the ids Hugging Face `tokenizers` produces (Tokenizer.from_file(...).encode(...)).
//
// Reference: huggingface/tokenizers (tokenizer/mod.rs, added_vocabulary.rs, pre_tokenizers/,
// models/bpe/, processors/template.rs, decoders/byte_level.rs); GPT-2's byte-to-unicode map.
//
// Encoding pipeline, one step per file under src/io/tokenizer/:
//   invalid UTF-8 → U+FFFD (utf8.cpp)  → added tokens with normalized=false split out
//   (added_tokens.cpp) → normalizer on the other pieces (normalizer.cpp) → added tokens with
//   normalized=true split out → Split regex steps (pre_tokenizer.cpp, regex.cpp) → ByteLevel
//   (byte_level.cpp) → BPE merges by rank (bpe.cpp) → post-processor (post_processor.cpp).
// Supported components, the invalid-UTF-8 rule and known differences: docs/tokenizer.md.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace microllm::io {

// One entry of tokenizer.json's `added_tokens`; flags as Hugging Face defines them.
struct AddedToken {
  int32_t id = -1;
  std::string content;
  bool special = false;      // skipped by decode(skip_special_tokens = true)
  bool single_word = false;  // matches only when no word character (\w) touches either end
  bool lstrip = false;       // the match absorbs the whitespace on its left
  bool rstrip = false;       // the match absorbs the whitespace on its right
  bool normalized = true;    // matched in the normalized text instead of the raw text
};

// What microllm reads from tokenizer_config.json (every field optional). Tokens written as
// {"__type": "AddedToken", "content": ...} objects are reduced to their content.
struct TokenizerConfig {
  std::string tokenizer_class;           // e.g. "Qwen2Tokenizer"; empty when absent
  std::optional<std::string> bos_token;  // e.g. "<|begin_of_text|>"
  std::optional<std::string> eos_token;
  std::optional<std::string> pad_token;
  std::optional<std::string> unk_token;
  std::optional<bool> add_bos_token;  // read, not applied: see docs/tokenizer.md
  std::optional<bool> add_eos_token;
  std::optional<std::string> chat_template;  // the Jinja source when it is a single string
};

// tokenizer_config.json's text → what microllm reads of it; `source` names it in errors
// (op "tokenizer": not valid JSON, not an object, a token that is neither a string nor an
// AddedToken object, a malformed field).
TokenizerConfig parse_tokenizer_config(std::string_view json_text, const std::string& source);

class Tokenizer {
 public:
  // `path` is a directory holding tokenizer.json (and optionally tokenizer_config.json) or
  // the path of a tokenizer.json, whose sibling tokenizer_config.json is read when present.
  // Throws microllm::Error (op "tokenizer") naming the file and the unsupported component or
  // malformed field.
  static Tokenizer from_file(const std::string& path);
  // The same from JSON text; `source` names it in error messages.
  static Tokenizer from_json(std::string_view tokenizer_json, std::string_view config_json = {},
                             const std::string& source = "<memory>");

  // Token ids of `text`. Invalid UTF-8 is first repaired: every maximal ill-formed
  // subsequence becomes U+FFFD (what Rust's String::from_utf8_lossy does), so the ids are
  // those HF gives for the repaired string. `add_special_tokens` applies the post-processor
  // of tokenizer.json (TemplateProcessing adds e.g. a BOS; ByteLevel adds nothing).
  // Thread-safe.
  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens) const;

  // Text of `ids`: the ByteLevel decoder maps tokens back to bytes, and ill-formed UTF-8 in
  // the result becomes U+FFFD. Throws on an id that names no token (HF skips those silently).
  std::string decode(std::span<const int32_t> ids, bool skip_special_tokens) const;

  // The normalizer alone (NFC for Qwen; identity when tokenizer.json has none).
  std::string normalize(std::string_view text) const;
  // The pieces BPE sees, as UTF-8 text (before the byte-to-unicode map); an added token is
  // one piece. For tests and debugging.
  std::vector<std::string> pre_tokenize(std::string_view text) const;

  int64_t vocab_size() const;  // largest id + 1 over the model vocabulary and added tokens
  std::optional<int32_t> token_to_id(std::string_view token) const;  // added tokens first
  const std::string& id_to_token(int32_t id) const;                  // throws on an unknown id
  bool is_special(int32_t id) const;                                 // false for unknown ids
  bool has_token(int32_t id) const;  // the id names a token (model vocabulary or added)
  const std::vector<AddedToken>& added_tokens() const;
  const TokenizerConfig& config() const;
  const std::string& source() const;  // the file (or name) it was loaded from

  struct Impl;

 private:
  explicit Tokenizer(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const Impl> impl_;
  friend class StreamingDecoder;
};

// Decodes ids one at a time for streaming generation: push() returns only text made of
// complete UTF-8 characters and holds back the bytes of a character split across tokens.
// The concatenation of every push() and the final finish() equals decode(all ids).
class StreamingDecoder {
 public:
  explicit StreamingDecoder(const Tokenizer& tokenizer, bool skip_special_tokens = false);
  std::string push(int32_t id);  // the newly completed text (possibly empty)
  std::string finish();          // held-back bytes, as U+FFFD; the decoder is then reset
  size_t pending_bytes() const { return pending_.size(); }

 private:
  std::shared_ptr<const Tokenizer::Impl> impl_;
  bool skip_special_tokens_;
  bool first_ = true;    // no token emitted yet (the null decoder joins tokens with spaces)
  std::string pending_;  // bytes of an incomplete trailing character
};

// UTF-8 helpers shared by the tokenizer, the CLI and the server.
bool is_valid_utf8(std::string_view bytes);
// Each maximal ill-formed subsequence (Unicode §3.9, Table 3-7) becomes U+FFFD.
std::string to_valid_utf8(std::string_view bytes);

}  // namespace microllm::io
