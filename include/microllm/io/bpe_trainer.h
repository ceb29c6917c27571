// Byte-level BPE training: learns merges from UTF-8 text and writes a Hugging Face
// `tokenizer.json` that HF `tokenizers`, transformers.js and microllm's Tokenizer all load and
// encode identically (`microllm tokenizer train`).
//
// Reference: Sennrich et al. 2016 (BPE); Radford et al. 2019 (GPT-2: byte-level alphabet,
// split regex); HF tokenizers models/bpe/trainer.rs (pair counts updated per merge from
// the words that hold the pair, a max-heap with lazily refreshed counts, the tie-break).
//
// What is written (docs/tokenizer.md, "Training"):
//   ids 0..255      the 256 byte tokens, in code point order of GPT-2's byte-to-unicode map
//                   (as the vocabularies of GPT-2, Llama 3 and Qwen order them)
//   256..           one token per merge result, in merge order (a result already in the
//                   vocabulary keeps its id)
//   then            the special tokens, as added_tokens (special, normalized = false)
// normalizer null or NFC; pre_tokenizer Sequence[Split(regex, Isolated), ByteLevel(no prefix
// space, no regex)]; post_processor and decoder ByteLevel; merges as "left right" strings.
//
// The text is split exactly as encode() splits it: special tokens first, then the normalizer,
// then the Split regex (the same components, src/io/tokenizer/). Each file or add_text() call
// is one document; invalid UTF-8 is repaired as encode() repairs it (each maximal ill-formed
// subsequence becomes U+FFFD) and counted in the stats.
//
// Merge order: the pair with the highest count (summed over the words holding it, each word
// weighted by its frequency) merges next; a tie goes to the smallest (left id, right id) —
// HF BpeTrainer's rule, so with the same word counts the merges are HF's. Deterministic.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace microllm::io {

struct BpeTrainerConfig {
  int64_t vocab_size = 0;     // everything: 256 byte tokens + merge results + special tokens
  int64_t min_frequency = 0;  // stop once the best pair occurs fewer times (HF's meaning)
  std::vector<std::string> special_tokens;  // added tokens, ids after the model vocabulary
  std::string split_regex;                  // the Split pattern (Oniguruma syntax, as in HF)
  bool nfc = false;                         // NFC normalizer (else none)
  std::optional<std::string> bos_token;     // written to tokenizer_config.json; must be special
  std::optional<std::string> eos_token;
  // A document longer than this is counted in pieces (bounding memory), cut only where the
  // split cannot change; the preset patterns only (bpe_split_regex_preset). 0: never cut.
  int64_t chunk_bytes = int64_t{1} << 20;
  // Called now and then with a one-line progress message (the CLI prints it on stderr).
  std::function<void(const std::string&)> progress;
};

// The named Split patterns: "gpt2" (GPT-2, the ByteLevel pre-tokenizer's own), "llama3"
// (digit runs of 1-3), "qwen2" (single digits); nullopt for another name.
std::optional<std::string> bpe_split_regex_preset(std::string_view name);

struct BpeTrainingStats {
  int64_t documents = 0;
  int64_t input_bytes = 0;
  int64_t repaired_documents = 0;  // documents with invalid UTF-8 (repaired to U+FFFD)
  int64_t words = 0;               // pre-tokenized pieces, special tokens excluded
  int64_t unique_words = 0;
  int64_t merges = 0;
  bool stopped_early = false;  // no pair left (or under min_frequency) before vocab_size
  double count_seconds = 0;    // reading and splitting text
  double merge_seconds = 0;
};

struct BpeTrainingResult {
  std::vector<std::string> vocab;  // byte-level text of each model id (0..size-1)
  std::vector<std::pair<std::string, std::string>> merges;  // byte-level text, in rank order
  std::vector<std::string> special_tokens;  // id of special_tokens[i] = vocab.size() + i
  BpeTrainingStats stats;
};

class BpeTrainer {
 public:
  // Validates the configuration (vocabulary size, special tokens, regex) and throws
  // microllm::Error (op "tokenizer train") saying what was expected and what was found.
  explicit BpeTrainer(BpeTrainerConfig config);
  ~BpeTrainer();
  BpeTrainer(BpeTrainer&&) noexcept;
  BpeTrainer& operator=(BpeTrainer&&) noexcept;

  // Counts the words of one document.
  void add_text(std::string_view document);
  // Counts the words of a file read as one document; throws if it cannot be read.
  void add_file(const std::string& path);
  // Runs the merges; the counted words are left untouched (train() may run again).
  BpeTrainingResult train() const;

  const BpeTrainerConfig& config() const;

  struct State;

 private:
  std::unique_ptr<State> state_;
};

// tokenizer.json and tokenizer_config.json text for a training result.
std::string bpe_tokenizer_json(const BpeTrainingResult& result, const BpeTrainerConfig& config);
std::string bpe_tokenizer_config_json(const BpeTrainingResult& result,
                                      const BpeTrainerConfig& config);

// Checks that `dir` may receive the files: it is not a file, and holds no tokenizer.json
// unless `overwrite`. Call before training so that a long run is not wasted.
void check_bpe_output_dir(const std::string& dir, bool overwrite);
// Creates `dir` if needed and writes both files (each to a temporary name, then renamed).
void write_bpe_tokenizer(const std::string& dir, const BpeTrainingResult& result,
                         const BpeTrainerConfig& config, bool overwrite);

}  // namespace microllm::io
