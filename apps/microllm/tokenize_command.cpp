// `microllm tokenize --tokenizer DIR|tokenizer.json --out FILE.bin [--separator TOKEN]
// [--add-special-tokens] TEXT_FILES…`: encodes each text file as one document and writes the
// token file training reads (microllm-tokens-v1: FILE.bin + FILE.bin.json). Progress goes to
// stderr, one line per file.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <optional>
#include <sstream>

#include "commands.h"
#include "microllm/io/tokenizer.h"
#include "microllm/train/token_file.h"

namespace microllm::app {
namespace {

struct TokenizeCli {
  std::string tokenizer, out, separator;
  std::vector<std::string> files;
  bool add_special_tokens = false;
};

int run_tokenize(const TokenizeCli& cli) {
  const io::Tokenizer tokenizer = io::Tokenizer::from_file(cli.tokenizer);
  std::optional<int32_t> separator;
  if (!cli.separator.empty()) {
    separator = tokenizer.token_to_id(cli.separator);
    MICROLLM_CHECK(separator.has_value(), "tokenize", "--separator '", cli.separator,
                   "' is not a token of ", tokenizer.source());
  }
  std::vector<uint32_t> tokens;
  const auto start = std::chrono::steady_clock::now();
  size_t total_bytes = 0;
  for (size_t i = 0; i < cli.files.size(); ++i) {
    std::ifstream in(cli.files[i], std::ios::binary);
    MICROLLM_CHECK(in.good(), "tokenize", "cannot read ", cli.files[i]);
    std::ostringstream text;
    text << in.rdbuf();
    const std::string document = text.str();
    for (int32_t id : tokenizer.encode(document, cli.add_special_tokens))
      tokens.push_back(static_cast<uint32_t>(id));
    if (separator) tokens.push_back(static_cast<uint32_t>(*separator));
    total_bytes += document.size();
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::fprintf(stderr, "tokenize: [%zu/%zu] %s — %zu tokens so far, %.1f MB in %.1f s\n", i + 1,
                 cli.files.size(), cli.files[i].c_str(), tokens.size(),
                 static_cast<double>(total_bytes) / 1e6, seconds);
  }
  train::write_token_file(cli.out, tokens, tokenizer.vocab_size());
  std::printf("wrote %s (%zu tokens, vocabulary %lld) and %s.json\n", cli.out.c_str(),
              tokens.size(), static_cast<long long>(tokenizer.vocab_size()), cli.out.c_str());
  return 0;
}

}  // namespace

Command add_tokenize_command(CLI::App& parent) {
  auto c = std::make_shared<TokenizeCli>();
  CLI::App* cmd =
      parent.add_subcommand("tokenize", "Encode text files into a token file for training");
  cmd->add_option("--tokenizer", c->tokenizer, "folder with tokenizer.json, or the file")
      ->required();
  cmd->add_option("--out", c->out,
                  "token file to write (NAME.bin; the manifest goes to NAME.bin.json)")
      ->required();
  cmd->add_option("--separator", c->separator,
                  "token appended after each file, e.g. <|endoftext|>");
  cmd->add_flag("--add-special-tokens", c->add_special_tokens,
                "apply the tokenizer's post-processor (e.g. BOS)");
  cmd->add_option("files", c->files, "text files, one document each")
      ->required()
      ->check(CLI::ExistingFile);
  return {cmd, [c] { return run_tokenize(*c); }};
}

}  // namespace microllm::app
