// The parts of the byte-level BPE tokenizer (internal; the API is microllm/io/tokenizer.h).
//
// Each part mirrors one Hugging Face `tokenizers` component and lives in its own .cpp:
//   utf8.cpp            UTF-8 validation and lossy repair (Rust String::from_utf8_lossy)
//   regex.cpp           PCRE2 with Oniguruma's meaning of \s and Unicode 15 categories
//   normalizer.cpp      NFC / NFD / NFKC / NFKD (utf8proc), Sequence
//   added_tokens.cpp    AddedVocabulary: leftmost-longest matching, single_word/lstrip/rstrip
//   pre_tokenizer.cpp   Split (behavior, invert) steps and the ByteLevel step
//   byte_level.cpp      GPT-2's byte <-> unicode map
//   bpe.cpp             BPE merges by rank, ignore_merges, the per-word cache
//   post_processor.cpp  ByteLevel, TemplateProcessing, Sequence
//   tokenizer_json.cpp  reading tokenizer.json / tokenizer_config.json into these parts
//   tokenizer.cpp       encode / decode; streaming_decoder.cpp
// Text is UTF-8 in std::string / std::string_view; pieces are byte ranges of their parent.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "microllm/io/tokenizer.h"

namespace microllm::io::tokenizer_detail {

// std::string-keyed map that also looks up by std::string_view without a copy.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
template <class V>
using StringMap = std::unordered_map<std::string, V, StringHash, std::equal_to<>>;

// ---- utf8.cpp ---------------------------------------------------------------------------
// Appends `in` to `out` with each maximal ill-formed subsequence replaced by U+FFFD. When
// `final` is false, a valid but incomplete character at the end is left unconsumed. Returns
// the number of bytes of `in` consumed.
size_t append_repaired_utf8(std::string_view in, std::string& out, bool final);
// Length in bytes of the (valid) UTF-8 character starting at s[i]; 1 past the end.
size_t utf8_char_size(std::string_view s, size_t i);
// Decodes the valid UTF-8 character at s[i] (no checks).
char32_t utf8_decode_at(std::string_view s, size_t i);
// Decodes the valid UTF-8 character ending at s[end) (no checks).
char32_t utf8_decode_before(std::string_view s, size_t end);
void utf8_append(std::string& out, char32_t cp);

// Unicode White_Space (= Oniguruma's and Rust regex's \s).
bool is_unicode_whitespace(char32_t cp);
// Rust regex's Unicode \w (Alphabetic, M, Nd, Pc, Join_Control), used by single_word.
bool is_word_character(char32_t cp);

// ---- regex.cpp ----------------------------------------------------------------------------
// Rewrites an Oniguruma pattern (as HF tokenizers compiles it) into a PCRE2 pattern with the
// same meaning: \s, \S and \d as Oniguruma defines them, and \p{<general category>} extended
// with the code points PCRE2's (older) Unicode tables lack but utf8proc's Unicode 15 has.
// Throws microllm::Error for constructs the two engines read differently (\w, \h, \b, \Q,
// nested classes) naming `where`.
std::string translate_oniguruma_pattern(std::string_view pattern, const std::string& where);

// A compiled pattern (PCRE2_UTF | PCRE2_UCP, JIT when available). Thread-safe to share.
class Regex {
 public:
  Regex(std::string_view oniguruma_pattern, const std::string& where);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;
  // Every match in `text` as [begin, end) byte offsets, in order, with the iteration rule of
  // Rust's onig/regex find_iter (an empty match right after a match is skipped).
  void find_all(std::string_view text, std::vector<std::pair<size_t, size_t>>& out) const;
  const std::string& pattern() const { return pattern_; }

 private:
  std::string pattern_;   // the translated PCRE2 pattern
  void* code_ = nullptr;  // pcre2_code_8*
  bool jit_ = false;

 public:
  bool jit() const { return jit_; }  // PCRE2's JIT compiled it (else the interpreter runs)
};

// ---- normalizer.cpp -----------------------------------------------------------------------
enum class NormalForm { NFC, NFD, NFKC, NFKD };
struct Normalizer {
  std::vector<NormalForm> steps;  // applied in order; empty = identity
  bool identity() const { return steps.empty(); }
  std::string apply(std::string_view text) const;
};

// ---- byte_level.cpp -----------------------------------------------------------------------
// GPT-2's map from each byte to a printable character, as UTF-8 (e.g. ' ' -> "Ġ").
const std::array<std::string, 256>& byte_to_unicode();
// Inverse on a whole token: the bytes when every character is in the map, else nullopt.
std::optional<std::string> unicode_to_bytes(std::string_view token);

// ---- added_tokens.cpp ---------------------------------------------------------------------
struct Segment {
  size_t begin = 0, end = 0;  // byte range in the text that was split
  int32_t id = -1;            // the added token's id, or -1 for ordinary text
};

// The added tokens of one kind (normalized or not), matched leftmost-longest as HF's
// daachorse automaton does, with single_word / lstrip / rstrip applied like HF.
class AddedTokenMatcher {
 public:
  // `patterns[i]` is the text to find for `tokens[i]` (its content, normalized if needed).
  void build(const std::vector<const AddedToken*>& tokens,
             const std::vector<std::string>& patterns);
  bool empty() const { return entries_.empty(); }
  // Splits `text` into segments covering it (an empty text gives one empty segment).
  void split(std::string_view text, std::vector<Segment>& out) const;

 private:
  struct Node {
    std::vector<std::pair<unsigned char, int32_t>> children;  // sorted by byte
    int32_t entry = -1;                                       // entries_ index ending here
  };
  struct Entry {
    const AddedToken* token;
    size_t length;
  };
  std::vector<Node> nodes_;
  std::vector<Entry> entries_;
  std::array<bool, 256> first_byte_{};  // bytes that can start a match
  // Longest entry matching at text[pos], or -1.
  int32_t longest_at(std::string_view text, size_t pos) const;
};

// ---- pre_tokenizer.cpp --------------------------------------------------------------------
enum class SplitBehavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };

struct SplitStep {
  std::unique_ptr<Regex> regex;  // the Regex pattern, or a String pattern escaped into one
  SplitBehavior behavior = SplitBehavior::Isolated;
  bool invert = false;
  // Appends the non-empty pieces of `piece` (sub-views of it) to `out`.
  void split(std::string_view piece, std::vector<std::string_view>& out,
             std::vector<std::pair<size_t, size_t>>& scratch) const;
};

struct PreTokenizer {
  std::vector<SplitStep> splits;  // Split steps, in order, before the ByteLevel step
  bool add_prefix_space = false;  // ByteLevel: prepend ' ' to a piece not starting with one
  std::unique_ptr<Regex> byte_level_regex;  // ByteLevel use_regex: GPT-2's pattern
  // Calls `emit` with every final piece (raw UTF-8, before the byte map) of `text`.
  void run(std::string_view text, const std::function<void(std::string_view)>& emit) const;
};

// The GPT-2 pattern the ByteLevel pre-tokenizer uses when use_regex is true.
extern const char* const kGpt2Pattern;

// ---- bpe.cpp ------------------------------------------------------------------------------
class BpeModel {
 public:
  StringMap<int32_t> vocab;              // token (byte-level text) -> id
  std::vector<std::string> id_to_token;  // "" for ids with no token
  std::vector<bool> has_id;
  bool ignore_merges = false;
  std::optional<int32_t> unk_id;
  bool fuse_unk = false;

  // Call once vocab, merges and flags are set; `merges` are (left, right) token pairs.
  void finalize(const std::vector<std::pair<std::string, std::string>>& merges,
                const std::string& where);
  // Appends the ids of one pre-tokenized piece given as raw bytes.
  void encode_word(std::string_view raw, std::vector<int32_t>& ids) const;

 private:
  struct MergeValue {
    uint32_t rank;
    int32_t new_id;
  };
  // Open-addressing map (left id, right id) -> MergeValue; keys packed in a uint64.
  std::vector<uint64_t> merge_keys_;
  std::vector<MergeValue> merge_values_;
  uint64_t merge_mask_ = 0;
  std::array<int32_t, 256> byte_id_{};  // id of each byte's one-character token, or -1
  StringMap<int32_t> raw_vocab_;        // ignore_merges: raw bytes -> id

  const MergeValue* find_merge(int32_t left, int32_t right) const;
  void merge(std::string_view raw, std::vector<int32_t>& out) const;

  // Per-word cache: real text repeats words, and a hit skips the merge loop. Sharded so
  // threads encoding at once rarely wait on each other.
  struct CacheShard {
    std::mutex mutex;
    StringMap<std::vector<int32_t>> map;
  };
  static constexpr size_t kCacheShards = 16;
  static constexpr size_t kCacheEntriesPerShard = 8192;
  static constexpr size_t kMaxCachedWordBytes = 256;  // HF's MAX_LENGTH
  mutable std::array<CacheShard, kCacheShards> cache_;
};

// ---- post_processor.cpp -------------------------------------------------------------------
// The single-sequence form of the post-processor: the ids placed around the sequence when
// add_special_tokens is true (ByteLevel contributes none; TemplateProcessing its specials).
struct PostProcessor {
  std::vector<int32_t> prefix;
  std::vector<int32_t> suffix;
  void apply(std::vector<int32_t>& ids) const;
};
// Reads tokenizer.json's "post_processor": null, ByteLevel, TemplateProcessing or a Sequence
// of them; anything else is an error naming `where`.
PostProcessor read_post_processor(const nlohmann::json& j, const std::string& where);

}  // namespace microllm::io::tokenizer_detail

namespace microllm::io {

// Everything a loaded tokenizer holds; shared, immutable after loading (the BPE cache is
// internally synchronized).
struct Tokenizer::Impl {
  std::string source;
  TokenizerConfig config;
  tokenizer_detail::Normalizer normalizer;
  tokenizer_detail::PreTokenizer pre_tokenizer;
  tokenizer_detail::BpeModel model;
  tokenizer_detail::PostProcessor post_processor;
  std::vector<AddedToken> added_tokens;  // in file order, ids as HF assigns them
  tokenizer_detail::StringMap<int32_t> added_by_content;
  tokenizer_detail::AddedTokenMatcher raw_matcher;         // normalized == false
  tokenizer_detail::AddedTokenMatcher normalized_matcher;  // normalized == true
  bool byte_level_decoder = true;  // false: tokenizer.json has no decoder (tokens joined by ' ')
  // Per id: the bytes decode() emits for it, whether it is special, whether it exists.
  std::vector<std::string> decode_bytes;
  std::vector<bool> special;
  std::vector<bool> known;
  std::vector<std::string> token_text;  // the token string of each id (added tokens first)

  void encode_into(std::string_view valid_utf8, std::vector<int32_t>& ids) const;
  // Calls `emit(piece, id)` for each piece after added-token splitting, normalization and
  // pre-tokenization; id >= 0 for an added token, -1 for a piece that goes to BPE.
  void for_each_piece(std::string_view valid_utf8,
                      const std::function<void(std::string_view, int32_t)>& emit) const;
  void check_id(int32_t id) const;
};

}  // namespace microllm::io
