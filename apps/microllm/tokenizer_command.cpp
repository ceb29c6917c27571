// `microllm tokenizer encode|decode`: a Hugging Face tokenizer.json from the command line.
//
//   microllm tokenizer encode --tokenizer DIR|tokenizer.json --text "…" [--add-special-tokens]
//       prints the ids as one JSON array
//   microllm tokenizer encode --tokenizer … --input-jsonl FILE [--add-special-tokens]
//       FILE holds one JSON string per line; prints one JSON id array per line
//   microllm tokenizer decode --tokenizer … --ids "[…]" [--skip-special-tokens]
//       prints the text followed by a newline
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "microllm/core/error.h"
#include "microllm/io/tokenizer.h"

namespace microllm::app {
namespace {

struct EncodeOptions {
  std::string tokenizer;
  std::string text;
  bool has_text = false;
  std::string input_jsonl;
  bool add_special_tokens = false;
};

struct DecodeOptions {
  std::string tokenizer;
  std::string ids;
  bool skip_special_tokens = false;
};

void append_ids(std::string& out, const std::vector<int32_t>& ids) {
  out += '[';
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) out += ',';
    out += std::to_string(ids[i]);
  }
  out += "]\n";
}

void write_stdout(const std::string& s) { std::fwrite(s.data(), 1, s.size(), stdout); }

int run_encode(const EncodeOptions& o) {
  const io::Tokenizer tokenizer = io::Tokenizer::from_file(o.tokenizer);
  std::string out;
  if (o.has_text) {
    append_ids(out, tokenizer.encode(o.text, o.add_special_tokens));
    write_stdout(out);
    return 0;
  }
  std::ifstream in(o.input_jsonl, std::ios::binary);
  MICROLLM_CHECK(in.good(), "tokenizer", "cannot open --input-jsonl ", o.input_jsonl);
  std::string line;
  for (size_t number = 1; std::getline(in, line); ++number) {
    nlohmann::json value;
    try {
      value = nlohmann::json::parse(line);
    } catch (const nlohmann::json::parse_error& e) {
      MICROLLM_FAIL("tokenizer", o.input_jsonl, ":", number, ": not a JSON string (", e.what(),
                    ")");
    }
    MICROLLM_CHECK(value.is_string(), "tokenizer", o.input_jsonl, ":", number,
                   ": expected a JSON string, found ", value.type_name());
    append_ids(out, tokenizer.encode(value.get_ref<const std::string&>(), o.add_special_tokens));
    if (out.size() > (1 << 20)) {
      write_stdout(out);
      out.clear();
    }
  }
  write_stdout(out);
  return 0;
}

int run_decode(const DecodeOptions& o) {
  std::vector<int32_t> ids;
  try {
    ids = nlohmann::json::parse(o.ids).get<std::vector<int32_t>>();
  } catch (const nlohmann::json::exception& e) {
    MICROLLM_FAIL("tokenizer", "--ids must be a JSON array of integer ids, e.g. \"[9707, 1879]\" (",
                  e.what(), ")");
  }
  const io::Tokenizer tokenizer = io::Tokenizer::from_file(o.tokenizer);
  write_stdout(tokenizer.decode(ids, o.skip_special_tokens) + "\n");
  return 0;
}

}  // namespace

Command add_tokenizer_train_command(CLI::App& tokenizer);        // tokenizer_train_command.cpp
Command add_tokenizer_render_chat_command(CLI::App& tokenizer);  // its own .cpp

Command add_tokenizer_command(CLI::App& parent) {
  CLI::App* cmd = parent.add_subcommand(
      "tokenizer", "Encode and decode text with a Hugging Face tokenizer.json");
  cmd->require_subcommand(1);
  const char* tokenizer_help =
      "directory holding tokenizer.json (and tokenizer_config.json), or a tokenizer.json";

  auto enc = std::make_shared<EncodeOptions>();
  CLI::App* encode = cmd->add_subcommand("encode", "Print the token ids of text as JSON");
  encode->add_option("--tokenizer", enc->tokenizer, tokenizer_help)->required();
  CLI::Option* text = encode->add_option("--text", enc->text, "the text to encode");
  CLI::Option* jsonl =
      encode->add_option("--input-jsonl", enc->input_jsonl,
                         "file of one JSON string per line; prints one id array per line");
  text->excludes(jsonl);
  encode->add_flag("--add-special-tokens", enc->add_special_tokens,
                   "apply tokenizer.json's post-processor (e.g. prepend a BOS)");
  encode->callback([enc, text, jsonl] {
    if (text->count() == 0 && jsonl->count() == 0)
      throw CLI::RequiredError("--text or --input-jsonl");
    enc->has_text = text->count() > 0;
  });

  auto dec = std::make_shared<DecodeOptions>();
  CLI::App* decode = cmd->add_subcommand("decode", "Print the text of token ids");
  decode->add_option("--tokenizer", dec->tokenizer, tokenizer_help)->required();
  decode->add_option("--ids", dec->ids, "JSON array of ids, e.g. \"[9707, 1879]\"")->required();
  decode->add_flag("--skip-special-tokens", dec->skip_special_tokens,
                   "leave special tokens out of the text");

  const Command train = add_tokenizer_train_command(*cmd);
  const Command render_chat = add_tokenizer_render_chat_command(*cmd);

  return {cmd, [enc, dec, encode, train, render_chat] {
            if (*train.app) return train.run();
            if (*render_chat.app) return render_chat.run();
            return *encode ? run_encode(*enc) : run_decode(*dec);
          }};
}

}  // namespace microllm::app
