// The post-processor for one sequence with add_special_tokens: the special ids placed
// before and after it (e.g. Llama 3's <|begin_of_text|>).
//
// Reference: HF tokenizers processors/template.rs (TemplateProcessing: `single` is a list of
// {"SpecialToken": {"id": name}} and {"Sequence": {"id": "A"}} items, `special_tokens` maps a
// name to its ids), processors/sequence.rs (each processor wraps the previous result),
// pre_tokenizers/byte_level.rs (ByteLevel as a post-processor only trims offsets: no ids).
#include <nlohmann/json.hpp>

#include "components.h"
#include "microllm/core/error.h"

namespace microllm::io::tokenizer_detail {

void PostProcessor::apply(std::vector<int32_t>& ids) const {
  if (prefix.empty() && suffix.empty()) return;
  ids.insert(ids.begin(), prefix.begin(), prefix.end());
  ids.insert(ids.end(), suffix.begin(), suffix.end());
}

namespace {

// The `single` template of a TemplateProcessing: specials before and after sequence A.
PostProcessor read_template(const nlohmann::json& j, const std::string& where) {
  const std::string ctx = where + ": post_processor TemplateProcessing";
  MICROLLM_CHECK(j.contains("single") && j["single"].is_array(), "tokenizer", ctx,
                 " has no \"single\" list");
  const nlohmann::json& specials = j.value("special_tokens", nlohmann::json::object());
  PostProcessor out;
  bool seen_sequence = false;
  for (const nlohmann::json& item : j["single"]) {
    if (item.contains("Sequence")) {
      const std::string id = item["Sequence"].value("id", "A");
      MICROLLM_CHECK(id == "A" && !seen_sequence, "tokenizer", ctx,
                     ": \"single\" must hold sequence A once, found ", item.dump());
      seen_sequence = true;
    } else if (item.contains("SpecialToken")) {
      const std::string name = item["SpecialToken"].at("id").get<std::string>();
      MICROLLM_CHECK(specials.contains(name), "tokenizer", ctx, ": special token \"", name,
                     "\" is not in \"special_tokens\"");
      const std::vector<int32_t> ids = specials[name].at("ids").get<std::vector<int32_t>>();
      std::vector<int32_t>& side = seen_sequence ? out.suffix : out.prefix;
      side.insert(side.end(), ids.begin(), ids.end());
    } else {
      MICROLLM_FAIL("tokenizer", ctx, ": unknown \"single\" item ", item.dump());
    }
  }
  MICROLLM_CHECK(seen_sequence, "tokenizer", ctx, ": \"single\" has no Sequence item");
  return out;
}

}  // namespace

PostProcessor read_post_processor(const nlohmann::json& j, const std::string& where) {
  if (j.is_null()) return {};
  const std::string type = j.value("type", "");
  if (type == "ByteLevel") return {};
  if (type == "TemplateProcessing") return read_template(j, where);
  if (type == "Sequence") {
    PostProcessor out;
    for (const nlohmann::json& step : j.at("processors")) {
      const PostProcessor inner = read_post_processor(step, where);
      // A later processor wraps what the earlier ones produced.
      out.prefix.insert(out.prefix.begin(), inner.prefix.begin(), inner.prefix.end());
      out.suffix.insert(out.suffix.end(), inner.suffix.begin(), inner.suffix.end());
    }
    return out;
  }
  MICROLLM_FAIL("tokenizer", where, ": unsupported post_processor \"", type,
                "\" (supported: ByteLevel, TemplateProcessing, Sequence)");
}

}  // namespace microllm::io::tokenizer_detail
