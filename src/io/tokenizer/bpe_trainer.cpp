// Byte-level BPE training: word counting with the encoder's own splitting, then the merge loop.
//
// Reference: Sennrich et al. 2016, "Neural Machine Translation of Rare Words with Subword
// Units" (§3.1); HF tokenizers models/bpe/trainer.rs and word.rs (per-word merge with
// count changes for the neighbour pairs, a max-heap refreshed lazily, ties to the smallest
// pair of ids). The API and the file layout are described in microllm/io/bpe_trainer.h.
//
// Memory: one entry per distinct word (its byte-id symbols and frequency); per pair its
// total count and the list of words that held it when it was created (a word index may
// repeat or be stale; merging a word that no longer holds the pair changes nothing).
#include "microllm/io/bpe_trainer.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <queue>
#include <unordered_map>
#include <unordered_set>

#include "components.h"
#include "microllm/core/error.h"
#include "microllm/core/hash.h"

namespace microllm::io {
namespace {

using namespace tokenizer_detail;
constexpr const char* kOp = "tokenizer train";

// ---- pairs of token ids, packed so that integer order is (left, right) order ----------
uint64_t pack(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}
int32_t left_of(uint64_t pair) { return static_cast<int32_t>(pair >> 32); }
int32_t right_of(uint64_t pair) { return static_cast<int32_t>(pair & 0xFFFFFFFFu); }

// splitmix64's finalizer: packed pairs of small ids hash badly with the identity.
struct PairHash {
  size_t operator()(uint64_t x) const { return static_cast<size_t>(splitmix64_mix(x)); }
};

struct Word {
  std::vector<int32_t> symbols;  // token ids, left to right
  int64_t count = 0;             // how often the word occurs in the text
};

// A heap entry: the pair's count when pushed. Highest count first; on equal counts the
// smallest (left id, right id) first.
struct Candidate {
  int64_t count;
  uint64_t pair;
  bool operator<(const Candidate& o) const {
    return count != o.count ? count < o.count : pair > o.pair;
  }
};

// Merges every non-overlapping (a, b) of `word`, left to right, into `merged`, reporting
// each neighbour pair that disappears (-1) or appears (+1) as HF's Word::merge does. The
// (a, b) pair itself is not reported: the caller never merges it again.
template <class Change>
void merge_word(std::vector<int32_t>& s, int32_t a, int32_t b, int32_t merged, Change&& change) {
  size_t out = 0;
  const size_t n = s.size();
  for (size_t i = 0; i < n;) {
    if (i + 1 < n && s[i] == a && s[i + 1] == b) {
      if (out > 0) {  // the left neighbour (already rewritten if it was merged just before)
        change(s[out - 1], a, -1);
        change(s[out - 1], merged, +1);
      }
      if (i + 2 < n) {  // the right neighbour
        change(b, s[i + 2], -1);
        change(merged, s[i + 2], +1);
      }
      s[out++] = merged;
      i += 2;
    } else {
      s[out++] = s[i++];
    }
  }
  s.resize(out);
}

std::string strip_op(const Error& e) {
  const std::string what = e.what();
  const std::string prefix = e.op() + ": ";
  return what.starts_with(prefix) ? what.substr(prefix.size()) : what;
}

}  // namespace

std::optional<std::string> bpe_split_regex_preset(std::string_view name) {
  if (name == "gpt2") return std::string(kGpt2Pattern);
  if (name == "llama3")
    return std::string(
        R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)");
  if (name == "qwen2")
    return std::string(
        R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)");
  return std::nullopt;
}

// Everything counted so far, and the encoder components that split the text.
struct BpeTrainer::State {
  BpeTrainerConfig config;
  Normalizer normalizer;
  PreTokenizer pre_tokenizer;
  std::vector<AddedToken> specials;  // the matcher points into this vector
  AddedTokenMatcher special_matcher;
  bool chunkable = false;          // a preset pattern and no special token holding '\n'
  StringMap<int64_t> word_counts;  // raw UTF-8 piece -> occurrences
  BpeTrainingStats stats;
  std::vector<Segment> segments;  // scratch
};

BpeTrainer::BpeTrainer(BpeTrainerConfig config) : state_(std::make_unique<State>()) {
  State& st = *state_;
  const auto specials = static_cast<int64_t>(config.special_tokens.size());
  MICROLLM_CHECK(config.vocab_size >= 256 + specials, kOp, "--vocab-size ", config.vocab_size,
                 " is too small: the vocabulary needs the 256 byte tokens plus ", specials,
                 " special token(s), so at least ", 256 + specials);
  MICROLLM_CHECK(config.vocab_size <= (int64_t{1} << 30), kOp, "--vocab-size ", config.vocab_size,
                 " is too large (at most 2^30)");
  MICROLLM_CHECK(config.min_frequency >= 0, kOp, "--min-frequency must be >= 0, found ",
                 config.min_frequency);
  MICROLLM_CHECK(!config.split_regex.empty(), kOp, "the split regex is empty");
  StringMap<bool> seen;
  for (const std::string& token : config.special_tokens) {
    MICROLLM_CHECK(!token.empty(), kOp, "a special token is empty (check --special-tokens for ",
                   "a stray comma)");
    MICROLLM_CHECK(is_valid_utf8(token), kOp, "special token \"", to_valid_utf8(token),
                   "\" is not valid UTF-8");
    MICROLLM_CHECK(seen.emplace(token, true).second, kOp, "special token \"", token,
                   "\" is listed twice");
  }
  // A special token spelled like a byte token would get the byte token's id from HF.
  for (const std::string& byte_token : byte_to_unicode())
    MICROLLM_CHECK(!seen.contains(byte_token), kOp, "special token \"", byte_token,
                   "\" is the byte-level text of a byte token; HF would give it that id");
  for (const auto* role : {&config.bos_token, &config.eos_token})
    if (role->has_value())
      MICROLLM_CHECK(seen.contains(**role), kOp, "BOS/EOS token \"", **role,
                     "\" is not one of the special tokens");
  try {
    st.pre_tokenizer.splits.emplace_back();
    SplitStep& split = st.pre_tokenizer.splits.back();
    split.regex = std::make_unique<Regex>(config.split_regex, "--regex");
    split.behavior = SplitBehavior::Isolated;
  } catch (const Error& e) {
    MICROLLM_FAIL(kOp, strip_op(e));
  }
  if (config.nfc) st.normalizer.steps.push_back(NormalForm::NFC);
  st.chunkable = false;
  for (const char* preset : {"gpt2", "llama3", "qwen2"})
    st.chunkable |= bpe_split_regex_preset(preset) == config.split_regex;
  for (const std::string& token : config.special_tokens)
    st.chunkable &= token.find('\n') == std::string::npos;
  // Special tokens split out of the raw text first, as encode() does for normalized=false.
  for (const std::string& token : config.special_tokens) {
    AddedToken t;
    t.id = static_cast<int32_t>(st.specials.size());  // >= 0 marks the matched segments
    t.content = token;
    t.special = true;
    t.normalized = false;
    st.specials.push_back(t);
  }
  std::vector<const AddedToken*> pointers;
  for (const AddedToken& t : st.specials) pointers.push_back(&t);
  st.special_matcher.build(pointers, config.special_tokens);
  st.config = std::move(config);
}

BpeTrainer::~BpeTrainer() = default;
BpeTrainer::BpeTrainer(BpeTrainer&&) noexcept = default;
BpeTrainer& BpeTrainer::operator=(BpeTrainer&&) noexcept = default;

const BpeTrainerConfig& BpeTrainer::config() const { return state_->config; }

namespace {

// Where a long document may be cut without changing its pieces: a line that starts with an
// ASCII letter after a line ending in a non-space character ("…x\nWord"). In the three
// preset patterns no match runs from "\n" into a letter, and the cut leaves the single "\n"
// before it a piece of its own either way (a run of whitespace there could be split
// differently by \s+(?!\S), hence the non-space before it). The next cut at or after
// `from`, or text.size().
size_t next_cut(std::string_view text, size_t from) {
  for (size_t p = std::max<size_t>(from, 2); p < text.size(); ++p) {
    const auto c = static_cast<unsigned char>(text[p]);
    if (text[p - 1] != '\n' || !((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))) continue;
    if (!is_unicode_whitespace(utf8_decode_before(text, p - 1))) return p;
  }
  return text.size();
}

}  // namespace

void BpeTrainer::add_text(std::string_view document) {
  State& st = *state_;
  const auto start = std::chrono::steady_clock::now();
  std::string repaired;
  if (!is_valid_utf8(document)) {  // as encode(): U+FFFD for each ill-formed subsequence
    repaired = to_valid_utf8(document);
    document = repaired;
    ++st.stats.repaired_documents;
  }
  ++st.stats.documents;
  st.stats.input_bytes += static_cast<int64_t>(document.size());
  // The steps of Tokenizer::Impl::for_each_piece: special tokens, normalizer, Split regex.
  std::string normalized;
  auto count = [&](std::string_view word) {
    ++st.stats.words;
    if (auto it = st.word_counts.find(word); it != st.word_counts.end())
      ++it->second;
    else
      st.word_counts.emplace(std::string(word), 1);
  };
  auto count_text = [&](std::string_view text) {
    st.segments.clear();
    st.special_matcher.split(text, st.segments);
    for (const Segment& seg : st.segments) {
      if (seg.id >= 0 || seg.end == seg.begin) continue;
      std::string_view piece = text.substr(seg.begin, seg.end - seg.begin);
      if (!st.normalizer.identity()) {
        normalized = st.normalizer.apply(piece);
        piece = normalized;
      }
      st.pre_tokenizer.run(piece, count);
    }
  };
  // The splitter keeps a few vectors per piece of its input (about 20 bytes of memory per
  // byte of text): long documents go through in pieces cut where the words cannot change.
  if (!st.chunkable || st.config.chunk_bytes <= 0) {
    count_text(document);
  } else {
    const auto chunk = static_cast<size_t>(st.config.chunk_bytes);
    for (size_t begin = 0; begin < document.size();) {
      const size_t end =
          document.size() - begin <= chunk ? document.size() : next_cut(document, begin + chunk);
      count_text(document.substr(begin, end - begin));
      begin = end;
    }
  }
  st.stats.count_seconds +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void BpeTrainer::add_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  MICROLLM_CHECK(in.good(), kOp, "cannot open training file ", path);
  const std::streamoff size = in.tellg();
  MICROLLM_CHECK(size >= 0, kOp, "cannot read training file ", path);
  std::string text(static_cast<size_t>(size), '\0');
  in.seekg(0);
  in.read(text.data(), size);
  MICROLLM_CHECK(in.gcount() == size, kOp, "cannot read training file ", path, " (read ",
                 in.gcount(), " of ", size, " bytes)");
  add_text(text);
}

BpeTrainingResult BpeTrainer::train() const {
  const State& st = *state_;
  const BpeTrainerConfig& config = st.config;
  const auto start = std::chrono::steady_clock::now();
  auto seconds = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  BpeTrainingResult result;
  result.stats = st.stats;
  result.stats.unique_words = static_cast<int64_t>(st.word_counts.size());

  // Byte tokens: ids 0..255 in code point order of their byte-level characters.
  const auto& alphabet = byte_to_unicode();
  std::array<int, 256> bytes{};
  for (int b = 0; b < 256; ++b) bytes[b] = b;
  std::sort(bytes.begin(), bytes.end(), [&](int x, int y) {
    return utf8_decode_at(alphabet[x], 0) < utf8_decode_at(alphabet[y], 0);
  });
  std::array<int32_t, 256> byte_id{};
  std::vector<std::string> token_bytes;  // raw bytes of each id
  StringMap<int32_t> id_of_bytes;
  for (int i = 0; i < 256; ++i) {
    byte_id[bytes[i]] = i;
    token_bytes.emplace_back(1, static_cast<char>(bytes[i]));
    id_of_bytes.emplace(token_bytes.back(), i);
  }

  // Words as byte ids. The merge sequence depends only on the counts, not on word order.
  std::vector<Word> words;
  words.reserve(st.word_counts.size());
  for (const auto& [text, count] : st.word_counts) {
    Word w;
    w.count = count;
    w.symbols.reserve(text.size());
    for (const char c : text) w.symbols.push_back(byte_id[static_cast<unsigned char>(c)]);
    words.push_back(std::move(w));
  }

  // Initial pair counts and the words holding each pair.
  std::unordered_map<uint64_t, int64_t, PairHash> pair_count;
  std::unordered_map<uint64_t, std::vector<uint32_t>, PairHash> pair_words;
  for (size_t w = 0; w < words.size(); ++w) {
    const auto& s = words[w].symbols;
    for (size_t i = 0; i + 1 < s.size(); ++i) {
      const uint64_t pair = pack(s[i], s[i + 1]);
      pair_count[pair] += words[w].count;
      auto& list = pair_words[pair];
      if (list.empty() || list.back() != w) list.push_back(static_cast<uint32_t>(w));
    }
  }
  std::vector<Candidate> initial;
  initial.reserve(pair_count.size());
  for (const auto& [pair, count] : pair_count) initial.push_back({count, pair});
  std::priority_queue<Candidate> queue(std::less<Candidate>(), std::move(initial));

  const int64_t model_size = config.vocab_size - static_cast<int64_t>(config.special_tokens.size());
  std::unordered_set<uint64_t, PairHash> merged_pairs;
  std::vector<std::pair<int32_t, int32_t>> merge_ids;  // (left, right) ids in rank order
  std::vector<uint64_t> touched;                       // pairs that gained occurrences
  double last_report = 0;
  while (static_cast<int64_t>(token_bytes.size()) < model_size) {
    if (queue.empty()) {
      result.stats.stopped_early = true;
      break;
    }
    const Candidate top = queue.top();
    queue.pop();
    if (merged_pairs.contains(top.pair)) continue;
    // Counts only fall while an entry waits (new pairs get new entries): refresh and retry.
    const int64_t current = pair_count[top.pair];
    if (current != top.count) {
      if (current > 0) queue.push({current, top.pair});
      continue;
    }
    if (top.count < 1 || top.count < config.min_frequency) {
      result.stats.stopped_early = true;
      break;
    }
    const int32_t a = left_of(top.pair), b = right_of(top.pair);
    std::string joined = token_bytes[a] + token_bytes[b];
    int32_t id;
    if (const auto it = id_of_bytes.find(joined); it != id_of_bytes.end()) {
      id = it->second;  // another merge made this token already: it keeps its id
    } else {
      id = static_cast<int32_t>(token_bytes.size());
      id_of_bytes.emplace(joined, id);
      token_bytes.push_back(std::move(joined));
    }
    merge_ids.emplace_back(a, b);
    merged_pairs.insert(top.pair);

    // Rewrite every word holding the pair; apply the neighbour changes to the counts.
    std::vector<uint32_t> holders = std::move(pair_words[top.pair]);
    pair_words.erase(top.pair);
    std::sort(holders.begin(), holders.end());
    holders.erase(std::unique(holders.begin(), holders.end()), holders.end());
    touched.clear();
    for (const uint32_t w : holders) {
      Word& word = words[w];
      merge_word(word.symbols, a, b, id, [&](int32_t l, int32_t r, int delta) {
        const uint64_t pair = pack(l, r);
        pair_count[pair] += delta * word.count;
        if (delta > 0) {
          auto& list = pair_words[pair];
          if (list.empty() || list.back() != w) list.push_back(w);
          touched.push_back(pair);
        }
      });
    }
    std::sort(touched.begin(), touched.end());
    touched.erase(std::unique(touched.begin(), touched.end()), touched.end());
    for (const uint64_t pair : touched) {
      const int64_t count = pair_count[pair];
      if (count > 0 && !merged_pairs.contains(pair)) queue.push({count, pair});
    }

    if (config.progress && seconds() - last_report >= 2.0) {
      last_report = seconds();
      char line[160];
      std::snprintf(line, sizeof(line),
                    "merges %zu, vocabulary %zu/%lld, last pair count %lld, %.1f s",
                    merge_ids.size(), token_bytes.size(), static_cast<long long>(model_size),
                    static_cast<long long>(top.count), last_report);
      config.progress(line);
    }
  }

  // Byte-level text of every token and merge.
  auto text_of = [&](int32_t id) {
    std::string out;
    for (const char c : token_bytes[id]) out += alphabet[static_cast<unsigned char>(c)];
    return out;
  };
  result.vocab.reserve(token_bytes.size());
  for (size_t id = 0; id < token_bytes.size(); ++id)
    result.vocab.push_back(text_of(static_cast<int32_t>(id)));
  result.merges.reserve(merge_ids.size());
  for (const auto& [left, right] : merge_ids)
    result.merges.emplace_back(result.vocab[left], result.vocab[right]);
  // HF gives an added token that is also a model token the model's id; ours would differ.
  StringMap<bool> vocab_texts;
  for (const std::string& t : result.vocab) vocab_texts.emplace(t, true);
  for (const std::string& special : config.special_tokens)
    MICROLLM_CHECK(!vocab_texts.contains(special), kOp, "special token \"", special,
                   "\" is also a learned or byte token of the vocabulary; HF would give it that "
                   "token's id. Choose a special token that cannot occur as byte-level text "
                   "(e.g. <|name|>)");
  result.special_tokens = config.special_tokens;
  result.stats.merges = static_cast<int64_t>(result.merges.size());
  result.stats.merge_seconds = seconds();
  return result;
}

}  // namespace microllm::io
