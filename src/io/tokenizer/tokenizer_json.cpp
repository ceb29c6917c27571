// Reading tokenizer.json and tokenizer_config.json into a Tokenizer::Impl.
//
// Reference: HF tokenizers tokenizer/serialization.rs (fields, version "1.0", added tokens
// added after the model with AddedVocabulary::add_tokens, which assigns their ids),
// normalizers/, pre_tokenizers/, models/bpe/serialization.rs (merges as "a b" strings or
// ["a", "b"] pairs), decoders/; transformers tokenization_utils_base.py for the config keys.
// Every rejection names the file and the component: SPEC §7.
#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "components.h"
#include "microllm/core/error.h"

namespace microllm::io {
namespace {

using nlohmann::json;
using namespace tokenizer_detail;

std::string read_text_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  MICROLLM_CHECK(in.good(), "tokenizer", "cannot open ", path.string());
  std::ostringstream text;
  text << in.rdbuf();
  MICROLLM_CHECK(!in.bad(), "tokenizer", "cannot read ", path.string());
  return text.str();
}

json parse_json(std::string_view text, const std::string& where) {
  try {
    return json::parse(text.begin(), text.end());
  } catch (const json::parse_error& e) {
    MICROLLM_FAIL("tokenizer", where, ": not valid JSON (", e.what(), ")");
  }
}

const json& member(const json& object, const char* key, const std::string& where) {
  MICROLLM_CHECK(object.is_object() && object.contains(key), "tokenizer", where, ": missing \"",
                 key, "\"");
  return object[key];
}

bool flag(const json& object, const char* key, bool fallback) {
  const auto it = object.find(key);
  return it == object.end() || it->is_null() ? fallback : it->get<bool>();
}

// ---- normalizer ----
void read_normalizer(const json& j, const std::string& where, Normalizer& out) {
  if (j.is_null()) return;
  const std::string type = j.value("type", "");
  if (type == "Sequence") {
    for (const json& step : member(j, "normalizers", where + ": normalizer Sequence"))
      read_normalizer(step, where, out);
    return;
  }
  if (type == "NFC")
    out.steps.push_back(NormalForm::NFC);
  else if (type == "NFD")
    out.steps.push_back(NormalForm::NFD);
  else if (type == "NFKC")
    out.steps.push_back(NormalForm::NFKC);
  else if (type == "NFKD")
    out.steps.push_back(NormalForm::NFKD);
  else
    MICROLLM_FAIL("tokenizer", where, ": unsupported normalizer \"", type,
                  "\" (supported: NFC, NFD, NFKC, NFKD, Sequence of those, null)");
}

// ---- pre-tokenizer ----
SplitBehavior read_behavior(const json& j, const std::string& where) {
  const std::string name = j.get<std::string>();
  if (name == "Removed") return SplitBehavior::Removed;
  if (name == "Isolated") return SplitBehavior::Isolated;
  if (name == "MergedWithPrevious") return SplitBehavior::MergedWithPrevious;
  if (name == "MergedWithNext") return SplitBehavior::MergedWithNext;
  if (name == "Contiguous") return SplitBehavior::Contiguous;
  MICROLLM_FAIL("tokenizer", where, ": unknown Split behavior \"", name, "\"");
}

// A String pattern matches itself literally: escape every ASCII punctuation character.
std::string escape_literal(const std::string& s) {
  std::string out;
  for (const char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x80 && !std::isalnum(u) && c != ' ' && c != '_') out += '\\';
    out += c;
  }
  return out;
}

void flatten_pre_tokenizer(const json& j, const std::string& where,
                           std::vector<const json*>& steps) {
  if (j.is_null()) return;
  if (j.value("type", "") == "Sequence") {
    for (const json& step : member(j, "pretokenizers", where + ": pre_tokenizer Sequence"))
      flatten_pre_tokenizer(step, where, steps);
  } else {
    steps.push_back(&j);
  }
}

void read_pre_tokenizer(const json& j, const std::string& where, PreTokenizer& out) {
  std::vector<const json*> steps;
  flatten_pre_tokenizer(j, where, steps);
  MICROLLM_CHECK(
      !steps.empty() && steps.back()->value("type", "") == "ByteLevel", "tokenizer", where,
      ": pre_tokenizer must end with ByteLevel (microllm supports byte-level BPE only), found ",
      steps.empty() ? std::string("none") : "\"" + steps.back()->value("type", "") + "\"");
  for (size_t i = 0; i + 1 < steps.size(); ++i) {
    const json& step = *steps[i];
    const std::string type = step.value("type", "");
    MICROLLM_CHECK(type == "Split", "tokenizer", where, ": unsupported pre_tokenizer \"", type,
                   "\" (supported: Split steps then ByteLevel, in a Sequence)");
    const std::string ctx = where + ": pre_tokenizer Split #" + std::to_string(i);
    const json& pattern = member(step, "pattern", ctx);
    SplitStep split;
    if (pattern.contains("Regex")) {
      split.regex = std::make_unique<Regex>(pattern["Regex"].get<std::string>(), ctx);
    } else if (pattern.contains("String")) {
      const std::string literal = pattern["String"].get<std::string>();
      MICROLLM_CHECK(!literal.empty(), "tokenizer", ctx, ": empty String pattern");
      split.regex = std::make_unique<Regex>(escape_literal(literal), ctx);
    } else {
      MICROLLM_FAIL("tokenizer", ctx,
                    ": pattern must be {\"Regex\": ...} or {\"String\": ...}, found ",
                    pattern.dump());
    }
    split.behavior = read_behavior(member(step, "behavior", ctx), ctx);
    split.invert = flag(step, "invert", false);
    out.splits.push_back(std::move(split));
  }
  // ByteLevel's defaults when a field is absent are HF's ByteLevel::default().
  const json& byte_level = *steps.back();
  out.add_prefix_space = flag(byte_level, "add_prefix_space", true);
  if (flag(byte_level, "use_regex", true))
    out.byte_level_regex =
        std::make_unique<Regex>(kGpt2Pattern, where + ": pre_tokenizer ByteLevel");
}

// ---- model ----
void read_model(const json& j, const std::string& where, BpeModel& model) {
  const std::string ctx = where + ": model";
  MICROLLM_CHECK(j.is_object(), "tokenizer", ctx, " must be an object");
  const std::string type = j.value("type", "BPE");
  MICROLLM_CHECK(type == "BPE", "tokenizer", where, ": unsupported model type \"", type,
                 "\" (microllm supports byte-level BPE only)");
  MICROLLM_CHECK(j.value("dropout", json()).is_null() || j["dropout"].get<double>() == 0.0,
                 "tokenizer", ctx,
                 ": BPE dropout is not supported (encoding must be deterministic)");
  MICROLLM_CHECK(!flag(j, "byte_fallback", false), "tokenizer", ctx,
                 ": byte_fallback (SentencePiece-style BPE) is not supported");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    const json value = j.value(key, json());
    MICROLLM_CHECK(value.is_null() || value.get<std::string>().empty(), "tokenizer", ctx, ": ", key,
                   " \"", value.get<std::string>(), "\" is not supported");
  }
  model.ignore_merges = flag(j, "ignore_merges", false);
  model.fuse_unk = flag(j, "fuse_unk", false);

  const json& vocab = member(j, "vocab", ctx);
  MICROLLM_CHECK(vocab.is_object(), "tokenizer", ctx, ".vocab must be an object of token: id");
  model.vocab.reserve(vocab.size());
  for (const auto& [token, id_json] : vocab.items()) {
    MICROLLM_CHECK(id_json.is_number_integer(), "tokenizer", ctx, ".vocab[\"", token,
                   "\"] is not an integer id");
    const int64_t id = id_json.get<int64_t>();
    MICROLLM_CHECK(id >= 0 && id < (int64_t{1} << 30), "tokenizer", ctx, ".vocab[\"", token,
                   "\"] = ", id, " is out of range");
    if (static_cast<size_t>(id) >= model.id_to_token.size()) {
      model.id_to_token.resize(static_cast<size_t>(id) + 1);
      model.has_id.resize(static_cast<size_t>(id) + 1, false);
    }
    model.id_to_token[id] = token;
    model.has_id[id] = true;
    model.vocab.emplace(token, static_cast<int32_t>(id));
  }
  if (const json unk = j.value("unk_token", json()); !unk.is_null()) {
    const auto it = model.vocab.find(unk.get<std::string>());
    MICROLLM_CHECK(it != model.vocab.end(), "tokenizer", ctx, ".unk_token \"",
                   unk.get<std::string>(), "\" is not in the vocabulary");
    model.unk_id = it->second;
  }

  const json& merges_json = member(j, "merges", ctx);
  MICROLLM_CHECK(merges_json.is_array(), "tokenizer", ctx, ".merges must be a list");
  std::vector<std::pair<std::string, std::string>> merges;
  merges.reserve(merges_json.size());
  for (size_t i = 0; i < merges_json.size(); ++i) {
    const json& m = merges_json[i];
    if (m.is_string()) {  // "left right", exactly one space
      const std::string s = m.get<std::string>();
      const size_t space = s.find(' ');
      MICROLLM_CHECK(space != std::string::npos && s.find(' ', space + 1) == std::string::npos,
                     "tokenizer", ctx, ".merges[", i, "] \"", s, "\" is not \"left right\"");
      merges.emplace_back(s.substr(0, space), s.substr(space + 1));
    } else {
      MICROLLM_CHECK(m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string(),
                     "tokenizer", ctx, ".merges[", i, "] is not a pair of strings: ", m.dump());
      merges.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
    }
  }
  model.finalize(merges, where);
}

// ---- added tokens ----
void read_added_tokens(const json& list, const std::string& where, Tokenizer::Impl& impl) {
  if (list.is_null()) return;
  MICROLLM_CHECK(list.is_array(), "tokenizer", where, ": added_tokens must be a list");
  // Ids as HF's AddedVocabulary::add_tokens assigns them: an existing added token or model
  // token keeps its id, a new content takes the next id after the model vocabulary.
  auto next_id = static_cast<int32_t>(impl.model.vocab.size());
  for (size_t i = 0; i < list.size(); ++i) {
    const json& t = list[i];
    const std::string ctx = where + ": added_tokens[" + std::to_string(i) + "]";
    AddedToken token;
    token.content = member(t, "content", ctx).get<std::string>();
    token.id = member(t, "id", ctx).get<int32_t>();
    token.special = flag(t, "special", false);
    token.single_word = flag(t, "single_word", false);
    token.lstrip = flag(t, "lstrip", false);
    token.rstrip = flag(t, "rstrip", false);
    token.normalized = flag(t, "normalized", !token.special);
    if (token.content.empty()) continue;  // HF ignores empty contents
    if (const auto it = impl.added_by_content.find(token.content);
        it != impl.added_by_content.end()) {
      token.id = it->second;
    } else if (const auto mit = impl.model.vocab.find(token.content);
               mit != impl.model.vocab.end()) {
      token.id = mit->second;
    } else {
      token.id = next_id++;
    }
    impl.added_by_content[token.content] = token.id;
    // A second entry for one id replaces the first, as in HF's id -> token map.
    auto same = std::find_if(impl.added_tokens.begin(), impl.added_tokens.end(),
                             [&](const AddedToken& a) { return a.id == token.id; });
    if (same != impl.added_tokens.end())
      *same = token;
    else
      impl.added_tokens.push_back(token);
  }
}

// ---- tokenizer_config.json ----
std::optional<std::string> config_token(const json& config, const char* key,
                                        const std::string& where) {
  const auto it = config.find(key);
  if (it == config.end() || it->is_null()) return std::nullopt;
  if (it->is_string()) return it->get<std::string>();
  MICROLLM_CHECK(it->is_object() && it->contains("content"), "tokenizer", where, ": \"", key,
                 "\" must be a string or an AddedToken object");
  return (*it)["content"].get<std::string>();
}

}  // namespace

TokenizerConfig parse_tokenizer_config(std::string_view text, const std::string& where) {
  TokenizerConfig config;
  if (text.empty()) return config;
  const json j = parse_json(text, where);
  MICROLLM_CHECK(j.is_object(), "tokenizer", where, ": must be a JSON object");
  try {
    if (j.contains("tokenizer_class") && j["tokenizer_class"].is_string())
      config.tokenizer_class = j["tokenizer_class"].get<std::string>();
    config.bos_token = config_token(j, "bos_token", where);
    config.eos_token = config_token(j, "eos_token", where);
    config.pad_token = config_token(j, "pad_token", where);
    config.unk_token = config_token(j, "unk_token", where);
    if (j.contains("add_bos_token") && !j["add_bos_token"].is_null())
      config.add_bos_token = j["add_bos_token"].get<bool>();
    if (j.contains("add_eos_token") && !j["add_eos_token"].is_null())
      config.add_eos_token = j["add_eos_token"].get<bool>();
    if (j.contains("chat_template") && j["chat_template"].is_string())
      config.chat_template = j["chat_template"].get<std::string>();
  } catch (const json::exception& e) {
    MICROLLM_FAIL("tokenizer", where, ": malformed field (", e.what(), ")");
  }
  return config;
}

namespace {

// Per-id tables for decode, token_to_id and is_special.
void build_id_tables(Tokenizer::Impl& impl) {
  size_t size = impl.model.id_to_token.size();
  for (const AddedToken& t : impl.added_tokens)
    size = std::max(size, static_cast<size_t>(t.id) + 1);
  impl.token_text.assign(size, std::string());
  impl.known.assign(size, false);
  for (size_t id = 0; id < impl.model.id_to_token.size(); ++id) {
    if (!impl.model.has_id[id]) continue;
    impl.token_text[id] = impl.model.id_to_token[id];
    impl.known[id] = true;
  }
  StringMap<bool> special_contents;
  for (const AddedToken& t : impl.added_tokens) {
    // HF decodes an added token from its normalized form (AddedVocabulary::simple_id_to_token).
    impl.token_text[t.id] = t.normalized ? impl.normalizer.apply(t.content) : t.content;
    impl.known[t.id] = true;
    if (t.special) special_contents[t.content] = true;
  }
  impl.special.assign(size, false);
  impl.decode_bytes.assign(size, std::string());
  for (size_t id = 0; id < size; ++id) {
    if (!impl.known[id]) continue;
    const std::string& text = impl.token_text[id];
    impl.special[id] = special_contents.contains(text);
    if (!impl.byte_level_decoder) {
      impl.decode_bytes[id] = text;
    } else if (auto bytes = unicode_to_bytes(text)) {
      impl.decode_bytes[id] = std::move(*bytes);
    } else {
      impl.decode_bytes[id] = text;  // a character outside the byte alphabet: the token's own UTF-8
    }
  }
}

void build_matchers(Tokenizer::Impl& impl) {
  std::vector<const AddedToken*> raw, normalized;
  std::vector<std::string> raw_patterns, normalized_patterns;
  for (const AddedToken& t : impl.added_tokens) {
    if (t.normalized) {
      normalized.push_back(&t);
      normalized_patterns.push_back(impl.normalizer.apply(t.content));
    } else {
      raw.push_back(&t);
      raw_patterns.push_back(t.content);
    }
  }
  impl.raw_matcher.build(raw, raw_patterns);
  impl.normalized_matcher.build(normalized, normalized_patterns);
}

std::shared_ptr<const Tokenizer::Impl> load(std::string_view tokenizer_json,
                                            std::string_view config_json, const std::string& source,
                                            const std::string& config_source) {
  auto impl = std::make_shared<Tokenizer::Impl>();
  impl->source = source;
  const json j = parse_json(tokenizer_json, source);
  MICROLLM_CHECK(j.is_object(), "tokenizer", source, ": must be a JSON object");
  try {
    if (j.contains("version") && !j["version"].is_null())
      MICROLLM_CHECK(j["version"] == "1.0", "tokenizer", source,
                     ": unknown tokenizer.json version ", j["version"].dump());
    for (const char* key : {"truncation", "padding"})
      MICROLLM_CHECK(!j.contains(key) || j[key].is_null(), "tokenizer", source, ": \"", key,
                     "\" is set; microllm never truncates or pads, so it would not match HF's ids");
    read_model(member(j, "model", source), source, impl->model);
    read_normalizer(j.value("normalizer", json()), source, impl->normalizer);
    read_pre_tokenizer(j.value("pre_tokenizer", json()), source, impl->pre_tokenizer);
    impl->post_processor = read_post_processor(j.value("post_processor", json()), source);
    const json decoder = j.value("decoder", json());
    const std::string decoder_type = decoder.is_null() ? "" : decoder.value("type", "");
    MICROLLM_CHECK(decoder.is_null() || decoder_type == "ByteLevel", "tokenizer", source,
                   ": unsupported decoder \"", decoder_type, "\" (supported: ByteLevel, null)");
    impl->byte_level_decoder = !decoder.is_null();
    read_added_tokens(j.value("added_tokens", json()), source, *impl);
  } catch (const json::exception& e) {
    MICROLLM_FAIL("tokenizer", source, ": malformed field (", e.what(), ")");
  }
  impl->config = parse_tokenizer_config(config_json, config_source);
  build_id_tables(*impl);
  build_matchers(*impl);
  return impl;
}

}  // namespace

Tokenizer Tokenizer::from_json(std::string_view tokenizer_json, std::string_view config_json,
                               const std::string& source) {
  return Tokenizer(load(tokenizer_json, config_json, source, source + " (config)"));
}

Tokenizer Tokenizer::from_file(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  MICROLLM_CHECK(fs::exists(path, ec), "tokenizer", path,
                 " does not exist (expected a directory holding "
                 "tokenizer.json, or a tokenizer.json file)");
  const fs::path json_path =
      fs::is_directory(path, ec) ? fs::path(path) / "tokenizer.json" : fs::path(path);
  MICROLLM_CHECK(fs::is_regular_file(json_path, ec), "tokenizer", json_path.string(),
                 " does not exist");
  const fs::path config_path = json_path.parent_path() / "tokenizer_config.json";
  const std::string json_text = read_text_file(json_path);
  const std::string config_text =
      fs::is_regular_file(config_path, ec) ? read_text_file(config_path) : std::string();
  return Tokenizer(load(json_text, config_text, json_path.string(), config_path.string()));
}

}  // namespace microllm::io
