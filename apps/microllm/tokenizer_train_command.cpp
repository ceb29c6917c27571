// `microllm tokenizer train`: trains a byte-level BPE tokenizer on UTF-8 text files and writes
// DIR/tokenizer.json + DIR/tokenizer_config.json (Hugging Face format; microllm/io/bpe_trainer.h).
//
//   microllm tokenizer train --vocab-size N --out DIR [--min-frequency F]
//       [--special-tokens "<|endoftext|>,<|im_start|>"] [--regex gpt2|llama3|qwen2|PATTERN]
//       [--normalizer none|nfc] [--bos-token T] [--eos-token T] [--overwrite] FILES…
//
// Every input is checked before the text is read (files, --out, vocabulary size, special
// tokens, regex); progress goes to stderr, the summary to stdout. The written tokenizer is
// loaded back as a last check.
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "commands.h"
#include "microllm/core/error.h"
#include "microllm/io/bpe_trainer.h"
#include "microllm/io/tokenizer.h"

namespace microllm::app {
namespace {

constexpr const char* kOp = "tokenizer train";

struct TrainOptions {
  int64_t vocab_size = 0;
  std::string out;
  int64_t min_frequency = 0;
  std::string special_tokens;  // comma-separated
  std::string regex = "gpt2";
  std::string normalizer = "none";
  std::string bos_token, eos_token;
  bool overwrite = false;
  std::vector<std::string> files;
};

// "a, b,c" -> {"a", "b", "c"}; spaces around each name are dropped, an empty name is kept
// so that the trainer reports it.
std::vector<std::string> split_tokens(const std::string& list) {
  std::vector<std::string> out;
  if (list.empty()) return out;
  size_t begin = 0;
  while (true) {
    const size_t comma = list.find(',', begin);
    std::string item =
        list.substr(begin, comma == std::string::npos ? std::string::npos : comma - begin);
    const size_t first = item.find_first_not_of(" \t");
    item = first == std::string::npos
               ? std::string()
               : item.substr(first, item.find_last_not_of(" \t") - first + 1);
    out.push_back(item);
    if (comma == std::string::npos) return out;
    begin = comma + 1;
  }
}

int run_train(const TrainOptions& o) {
  namespace fs = std::filesystem;
  for (const std::string& file : o.files) {
    std::error_code ec;
    MICROLLM_CHECK(fs::exists(file, ec), kOp, "training file ", file, " does not exist");
    MICROLLM_CHECK(fs::is_regular_file(file, ec), kOp, "training file ", file,
                   " is not a regular file");
  }
  io::check_bpe_output_dir(o.out, o.overwrite);
  MICROLLM_CHECK(o.normalizer == "none" || o.normalizer == "nfc", kOp,
                 "--normalizer must be none or nfc, found \"", o.normalizer, "\"");

  io::BpeTrainerConfig config;
  config.vocab_size = o.vocab_size;
  config.min_frequency = o.min_frequency;
  config.special_tokens = split_tokens(o.special_tokens);
  config.split_regex = io::bpe_split_regex_preset(o.regex).value_or(o.regex);
  config.nfc = o.normalizer == "nfc";
  if (!o.bos_token.empty()) config.bos_token = o.bos_token;
  if (!o.eos_token.empty()) config.eos_token = o.eos_token;
  config.progress = [](const std::string& line) {
    std::fprintf(stderr, "tokenizer train: %s\n", line.c_str());
  };
  io::BpeTrainer trainer(config);

  for (size_t i = 0; i < o.files.size(); ++i) {
    trainer.add_file(o.files[i]);
    std::fprintf(stderr, "tokenizer train: [%zu/%zu] %s counted\n", i + 1, o.files.size(),
                 o.files[i].c_str());
  }
  const io::BpeTrainingResult result = trainer.train();
  const io::BpeTrainingStats& s = result.stats;
  if (s.repaired_documents > 0)
    std::fprintf(stderr,
                 "tokenizer train: warning: %lld file(s) held invalid UTF-8; each ill-formed "
                 "sequence was counted as U+FFFD, as encode() repairs it\n",
                 static_cast<long long>(s.repaired_documents));
  if (s.stopped_early)
    std::fprintf(stderr,
                 "tokenizer train: note: no pair left to merge%s after %lld merges: the "
                 "vocabulary has %zu ids, fewer than --vocab-size %lld\n",
                 o.min_frequency > 0 ? " at --min-frequency" : "", static_cast<long long>(s.merges),
                 result.vocab.size() + result.special_tokens.size(),
                 static_cast<long long>(o.vocab_size));
  io::write_bpe_tokenizer(o.out, result, trainer.config(), o.overwrite);

  // Load what was written, as a user would.
  const io::Tokenizer check = io::Tokenizer::from_file(o.out);
  const auto expected = static_cast<int64_t>(result.vocab.size() + result.special_tokens.size());
  MICROLLM_CHECK(check.vocab_size() == expected, kOp, "the written ", check.source(), " has ",
                 check.vocab_size(), " ids, expected ", expected);
  std::printf(
      "wrote %s/tokenizer.json: %lld ids (256 bytes, %lld merges, %zu special); %lld words "
      "(%lld distinct) from %.1f MB in %.2f s, merges in %.2f s\n",
      o.out.c_str(), static_cast<long long>(expected), static_cast<long long>(s.merges),
      result.special_tokens.size(), static_cast<long long>(s.words),
      static_cast<long long>(s.unique_words), static_cast<double>(s.input_bytes) / 1e6,
      s.count_seconds, s.merge_seconds);
  return 0;
}

}  // namespace

// Registered by add_tokenizer_command (tokenizer_command.cpp) under `tokenizer`.
Command add_tokenizer_train_command(CLI::App& tokenizer) {
  auto o = std::make_shared<TrainOptions>();
  CLI::App* cmd = tokenizer.add_subcommand(
      "train", "Train a byte-level BPE tokenizer on text files; writes tokenizer.json");
  cmd->add_option("--vocab-size", o->vocab_size,
                  "total ids: 256 byte tokens + merges + special tokens")
      ->required();
  cmd->add_option("--out", o->out, "directory for tokenizer.json and tokenizer_config.json")
      ->required();
  cmd->add_option("--min-frequency", o->min_frequency,
                  "stop when the most frequent pair occurs fewer times (default 0: never)");
  cmd->add_option("--special-tokens", o->special_tokens,
                  "comma-separated special tokens, e.g. \"<|endoftext|>,<|im_start|>\"");
  cmd->add_option("--regex", o->regex,
                  "split pattern: gpt2 (default), llama3, qwen2, or an Oniguruma regex");
  cmd->add_option("--normalizer", o->normalizer, "none (default) or nfc");
  cmd->add_option("--bos-token", o->bos_token, "special token written as bos_token");
  cmd->add_option("--eos-token", o->eos_token, "special token written as eos_token");
  cmd->add_flag("--overwrite", o->overwrite, "replace an existing tokenizer.json in --out");
  cmd->add_option("files", o->files, "UTF-8 text files, one document each")->required();
  return {cmd, [o] { return run_train(*o); }};
}

}  // namespace microllm::app
