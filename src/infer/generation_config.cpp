// generation_config.json (already parsed) → GenerationConfig → SamplingParams, with
// transformers' defaults and rules (see the header for the reference and the rules).
#include "microllm/infer/generation_config.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>

#include "microllm/core/error.h"

namespace microllm::infer {
namespace {

using nlohmann::json;
constexpr const char* kOp = "generation config";

bool is_integer(const json& v) {
  return v.is_number_integer() || (v.is_number_float() && std::isfinite(v.get<double>()) &&
                                   std::floor(v.get<double>()) == v.get<double>());
}

int64_t to_integer(const json& v, const std::string& where, const char* key) {
  MICROLLM_CHECK(is_integer(v), kOp, where, ": field '", key, "' must be an integer, found ",
                 v.dump());
  return v.is_number_integer() ? v.get<int64_t>() : static_cast<int64_t>(v.get<double>());
}

// Absent: `fallback`; null: nullopt (transformers' None); else the number.
std::optional<double> number_field(const json& j, const char* key, std::optional<double> fallback,
                                   const std::string& where) {
  if (!j.contains(key)) return fallback;
  const json& v = j.at(key);
  if (v.is_null()) return std::nullopt;
  MICROLLM_CHECK(v.is_number(), kOp, where, ": field '", key, "' must be a number or null, found ",
                 v.dump());
  return v.get<double>();
}

std::optional<int64_t> integer_field(const json& j, const char* key,
                                     std::optional<int64_t> fallback, const std::string& where) {
  if (!j.contains(key)) return fallback;
  const json& v = j.at(key);
  if (v.is_null()) return std::nullopt;
  return to_integer(v, where, key);
}

}  // namespace

GenerationConfig GenerationConfig::from_json(const json& j, const std::string& where) {
  MICROLLM_CHECK(j.is_object(), kOp, where, ": expected a JSON object, found ", j.type_name());
  GenerationConfig c;
  c.source = where;
  if (j.contains("do_sample") && !j.at("do_sample").is_null()) {
    const json& v = j.at("do_sample");
    MICROLLM_CHECK(v.is_boolean(), kOp, where, ": field 'do_sample' must be true or false, found ",
                   v.dump());
    c.do_sample = v.get<bool>();
  }
  c.temperature = number_field(j, "temperature", c.temperature, where);
  c.top_k = integer_field(j, "top_k", c.top_k, where);
  c.top_p = number_field(j, "top_p", c.top_p, where);
  c.min_p = number_field(j, "min_p", c.min_p, where);
  c.repetition_penalty = number_field(j, "repetition_penalty", c.repetition_penalty, where);
  c.max_new_tokens = integer_field(j, "max_new_tokens", std::nullopt, where);
  c.bos_token_id = integer_field(j, "bos_token_id", std::nullopt, where);
  c.pad_token_id = integer_field(j, "pad_token_id", std::nullopt, where);
  if (j.contains("eos_token_id") && !j.at("eos_token_id").is_null()) {
    const json& v = j.at("eos_token_id");
    if (v.is_array()) {
      for (const json& e : v) c.eos_token_ids.push_back(to_integer(e, where, "eos_token_id"));
    } else {
      MICROLLM_CHECK(is_integer(v), kOp, where,
                     ": field 'eos_token_id' must be an integer or a list of integers, found ",
                     v.dump());
      c.eos_token_ids.push_back(to_integer(v, where, "eos_token_id"));
    }
  }
  return c;
}

SamplingParams defaults_from(const GenerationConfig& c, const SamplingParams& base) {
  SamplingParams p = base;
  const std::string& where = c.source;
  if (c.max_new_tokens) {
    MICROLLM_CHECK(*c.max_new_tokens >= 1, kOp, where, ": max_new_tokens must be >= 1, found ",
                   *c.max_new_tokens);
    p.max_new_tokens = *c.max_new_tokens;
  }
  // The repetition penalty is a logits processor: it applies in greedy search too.
  const double rep = c.repetition_penalty.value_or(1.0);
  MICROLLM_CHECK(rep > 0.0 && std::isfinite(rep), kOp, where,
                 ": repetition_penalty must be a finite number > 0, found ", rep);
  p.repetition_penalty = static_cast<float>(rep);
  p.temperature = 0.0f;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  if (c.do_sample) {
    // Warpers exist only when sampling; None (nullopt) turns one off.
    const double t = c.temperature.value_or(1.0);
    MICROLLM_CHECK(t > 0.0 && std::isfinite(t), kOp, where,
                   ": temperature must be > 0 when do_sample is true (transformers rejects it; "
                   "set do_sample false for greedy), found ",
                   t);
    const int64_t k = c.top_k.value_or(0);
    MICROLLM_CHECK(k >= 0 && k <= std::numeric_limits<int32_t>::max(), kOp, where,
                   ": top_k must be an integer >= 0, found ", k);
    const double top_p = c.top_p.value_or(1.0);
    MICROLLM_CHECK(top_p >= 0.0 && top_p <= 1.0, kOp, where, ": top_p must be in [0, 1], found ",
                   top_p);
    const double min_p = c.min_p.value_or(0.0);
    MICROLLM_CHECK(min_p >= 0.0 && min_p <= 1.0, kOp, where, ": min_p must be in [0, 1], found ",
                   min_p);
    // top_p 0 keeps only the most likely token (min_tokens_to_keep = 1): greedy.
    if (top_p > 0.0) {
      p.temperature = static_cast<float>(t);
      p.top_k = static_cast<int32_t>(k);
      p.top_p = static_cast<float>(top_p);
      p.min_p = static_cast<float>(min_p);
    }
  }
  validate(p);
  return p;
}

std::vector<int32_t> merge_eos_token_ids(std::span<const int64_t> generation_config_eos,
                                         std::span<const int64_t> model_config_eos) {
  std::vector<int32_t> ids;
  for (const std::span<const int64_t> list : {generation_config_eos, model_config_eos}) {
    for (const int64_t id : list) {
      MICROLLM_CHECK(id >= 0 && id <= std::numeric_limits<int32_t>::max(), kOp,
                     "eos_token_id must be a token id in [0, 2^31), found ", id);
      if (std::find(ids.begin(), ids.end(), static_cast<int32_t>(id)) == ids.end())
        ids.push_back(static_cast<int32_t>(id));
    }
  }
  return ids;
}

}  // namespace microllm::infer
