// Writing a BPE training result as tokenizer.json + tokenizer_config.json.
//
// Reference: HF tokenizers tokenizer/serialization.rs (field order, version "1.0"),
// models/bpe/serialization.rs (vocab object, merges), added_vocabulary.rs (an added token
// takes the next id after the model vocabulary, so the ids written here are the ids HF and
// transformers.js assign). Merges are written as "left right" strings: every HF tokenizers
// release reads them (the ["left", "right"] form needs 0.20 or newer) and so does
// transformers.js; byte-level tokens never contain a space (' ' is 'Ġ'), so the form is exact.
// Files are written to a temporary name and renamed: a failed run leaves no half file.
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "microllm/core/error.h"
#include "microllm/io/bpe_trainer.h"

namespace microllm::io {
namespace {

namespace fs = std::filesystem;
using nlohmann::ordered_json;
constexpr const char* kOp = "tokenizer train";

ordered_json byte_level_step() {
  return {{"type", "ByteLevel"},
          {"add_prefix_space", false},
          {"trim_offsets", false},
          {"use_regex", false}};
}

ordered_json special_entry(const std::string& content) {
  return {{"content", content}, {"single_word", false}, {"lstrip", false},
          {"rstrip", false},    {"normalized", false},  {"special", true}};
}

void write_file(const fs::path& path, const std::string& text) {
  const fs::path tmp = path.string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    MICROLLM_CHECK(out.good(), kOp, "cannot create ", tmp.string());
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    out.flush();
    MICROLLM_CHECK(out.good(), kOp, "cannot write ", tmp.string());
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  MICROLLM_CHECK(!ec, kOp, "cannot rename ", tmp.string(), " to ", path.string(), ": ",
                 ec.message());
}

}  // namespace

std::string bpe_tokenizer_json(const BpeTrainingResult& result, const BpeTrainerConfig& config) {
  const auto model_size = static_cast<int64_t>(result.vocab.size());
  ordered_json added = ordered_json::array();
  for (size_t i = 0; i < result.special_tokens.size(); ++i) {
    ordered_json entry = {{"id", model_size + static_cast<int64_t>(i)}};
    entry.update(special_entry(result.special_tokens[i]));
    added.push_back(std::move(entry));
  }
  const ordered_json pre_tokenizer = {{"type", "Sequence"},
                                      {"pretokenizers",
                                       {{{"type", "Split"},
                                         {"pattern", {{"Regex", config.split_regex}}},
                                         {"behavior", "Isolated"},
                                         {"invert", false}},
                                        byte_level_step()}}};

  // Written by hand around the vocabulary and merges: one line per entry, and no ordered
  // map (whose inserts search linearly) for 100k+ tokens.
  std::string out = "{\n";
  auto field = [&](const char* key, const ordered_json& value) {
    out += "  \"";
    out += key;
    out += "\": " + value.dump() + ",\n";
  };
  field("version", "1.0");
  field("truncation", nullptr);
  field("padding", nullptr);
  out += "  \"added_tokens\": [";
  for (size_t i = 0; i < added.size(); ++i) out += (i ? ",\n    " : "\n    ") + added[i].dump();
  out += added.empty() ? "],\n" : "\n  ],\n";
  field("normalizer", config.nfc ? ordered_json{{"type", "NFC"}} : ordered_json(nullptr));
  field("pre_tokenizer", pre_tokenizer);
  field("post_processor", byte_level_step());
  field("decoder", byte_level_step());
  out +=
      "  \"model\": {\"type\": \"BPE\", \"dropout\": null, \"unk_token\": null, "
      "\"continuing_subword_prefix\": null, \"end_of_word_suffix\": null, \"fuse_unk\": false, "
      "\"byte_fallback\": false, \"ignore_merges\": false,\n    \"vocab\": {";
  for (size_t id = 0; id < result.vocab.size(); ++id)
    out += (id ? ",\n      " : "\n      ") + ordered_json(result.vocab[id]).dump() + ": " +
           std::to_string(id);
  out += "\n    },\n    \"merges\": [";
  for (size_t i = 0; i < result.merges.size(); ++i)
    out += (i ? ",\n      " : "\n      ") +
           ordered_json(result.merges[i].first + " " + result.merges[i].second).dump();
  out += result.merges.empty() ? "]\n  }\n}\n" : "\n    ]\n  }\n}\n";
  return out;
}

std::string bpe_tokenizer_config_json(const BpeTrainingResult& result,
                                      const BpeTrainerConfig& config) {
  const auto model_size = static_cast<int64_t>(result.vocab.size());
  ordered_json decoder = ordered_json::object();
  for (size_t i = 0; i < result.special_tokens.size(); ++i)
    decoder[std::to_string(model_size + static_cast<int64_t>(i))] =
        special_entry(result.special_tokens[i]);
  auto token_or_null = [](const std::optional<std::string>& t) {
    return t ? ordered_json(*t) : ordered_json(nullptr);
  };
  ordered_json j;
  j["tokenizer_class"] = "PreTrainedTokenizerFast";
  j["add_prefix_space"] = false;
  // transformers' default (true in older releases) rewrites " ." to "." when decoding.
  j["clean_up_tokenization_spaces"] = false;
  j["bos_token"] = token_or_null(config.bos_token);
  j["eos_token"] = token_or_null(config.eos_token);
  j["added_tokens_decoder"] = std::move(decoder);
  return j.dump(2) + "\n";
}

void check_bpe_output_dir(const std::string& dir, bool overwrite) {
  std::error_code ec;
  const fs::path path(dir);
  MICROLLM_CHECK(!dir.empty(), kOp, "--out is empty");
  if (!fs::exists(path, ec)) return;
  MICROLLM_CHECK(fs::is_directory(path, ec), kOp, "--out ", dir,
                 " exists and is not a directory (expected a directory for tokenizer.json)");
  if (overwrite) return;
  for (const char* name : {"tokenizer.json", "tokenizer_config.json"})
    MICROLLM_CHECK(!fs::exists(path / name, ec), kOp, "--out ", dir, " already holds ", name,
                   "; pass --overwrite to replace it");
}

void write_bpe_tokenizer(const std::string& dir, const BpeTrainingResult& result,
                         const BpeTrainerConfig& config, bool overwrite) {
  check_bpe_output_dir(dir, overwrite);
  std::error_code ec;
  fs::create_directories(dir, ec);
  MICROLLM_CHECK(!ec, kOp, "cannot create --out directory ", dir, ": ", ec.message());
  write_file(fs::path(dir) / "tokenizer.json", bpe_tokenizer_json(result, config));
  write_file(fs::path(dir) / "tokenizer_config.json", bpe_tokenizer_config_json(result, config));
}

}  // namespace microllm::io
