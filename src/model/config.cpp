// Reading Hugging Face config.json into ModelConfig, and the sizes derived from it.
#include "microllm/model/config.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numbers>

#include "microllm/core/error.h"
#include "microllm/ops/rope.h"

namespace microllm::model {
namespace {

using nlohmann::json;

// Typed field access with errors that name the field and the file.
class Fields {
 public:
  Fields(const json& j, const std::string& where) : j_(j), where_(where) {}

  bool has(const char* key) const { return j_.contains(key) && !j_.at(key).is_null(); }

  int64_t integer(const char* key) const {
    require(key);
    const json& v = j_.at(key);
    MICROLLM_CHECK(v.is_number_integer() ||
                       (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>()),
                   "config", where_, ": field '", key, "' must be an integer, found ", v.dump());
    return v.is_number_integer() ? v.get<int64_t>() : static_cast<int64_t>(v.get<double>());
  }
  int64_t integer_or(const char* key, int64_t fallback) const {
    return has(key) ? integer(key) : fallback;
  }

  double number(const char* key) const {
    require(key);
    const json& v = j_.at(key);
    MICROLLM_CHECK(v.is_number(), "config", where_, ": field '", key, "' must be a number, found ",
                   v.dump());
    return v.get<double>();
  }
  double number_or(const char* key, double fallback) const {
    return has(key) ? number(key) : fallback;
  }

  bool boolean_or(const char* key, bool fallback) const {
    if (!has(key)) return fallback;
    const json& v = j_.at(key);
    MICROLLM_CHECK(v.is_boolean(), "config", where_, ": field '", key,
                   "' must be true or false, found ", v.dump());
    return v.get<bool>();
  }

  std::string string_or(const char* key, const std::string& fallback) const {
    if (!has(key)) return fallback;
    const json& v = j_.at(key);
    MICROLLM_CHECK(v.is_string(), "config", where_, ": field '", key, "' must be a string, found ",
                   v.dump());
    return v.get<std::string>();
  }

  // Fails when the field is present with a value other than `allowed`.
  template <class T>
  void expect(const char* key, const T& allowed, const char* why) const {
    if (!has(key)) return;
    const json& v = j_.at(key);
    MICROLLM_CHECK(v == json(allowed), "config", where_, ": field '", key, "' is ", v.dump(),
                   "; microllm supports only ", json(allowed).dump(), " (", why, ")");
  }

  const json& at(const char* key) const { return j_.at(key); }

 private:
  void require(const char* key) const {
    MICROLLM_CHECK(has(key), "config", where_, ": missing required field '", key, "'");
  }
  const json& j_;
  const std::string& where_;
};

RopeScaling parse_rope_scaling(const json& scaling, const std::string& where) {
  MICROLLM_CHECK(scaling.is_object(), "config", where, ": rope scaling must be an object, found ",
                 scaling.dump());
  const Fields f(scaling, where);
  // transformers writes the kind as "rope_type" (older files: "type").
  const std::string type = f.string_or("rope_type", f.string_or("type", "default"));
  RopeScaling r;
  if (type == "default") return r;
  if (type == "linear") {
    r.type = RopeScaling::Type::Linear;
    r.factor = f.number("factor");
  } else if (type == "llama3") {
    r.type = RopeScaling::Type::Llama3;
    r.factor = f.number("factor");
    r.low_freq_factor = f.number("low_freq_factor");
    r.high_freq_factor = f.number("high_freq_factor");
    r.original_max_position_embeddings = f.integer("original_max_position_embeddings");
    MICROLLM_CHECK(r.high_freq_factor > r.low_freq_factor, "config", where,
                   ": llama3 rope scaling needs high_freq_factor > low_freq_factor, found ",
                   r.high_freq_factor, " and ", r.low_freq_factor);
  } else {
    MICROLLM_FAIL("config", where, ": rope scaling type '", type,
                  "' is not supported (supported: default, linear, llama3)");
  }
  MICROLLM_CHECK(r.factor > 0, "config", where, ": rope scaling factor must be positive, found ",
                 r.factor);
  return r;
}

}  // namespace

ModelConfig ModelConfig::from_json(const json& j, const std::string& where) {
  MICROLLM_CHECK(j.is_object(), "config", where, ": expected a JSON object");
  const Fields f(j, where);
  ModelConfig c;
  const std::string type = f.string_or("model_type", "");
  if (type == "qwen2")
    c.family = Family::Qwen2;
  else if (type == "llama")
    c.family = Family::Llama;
  else if (type == "qwen3")
    c.family = Family::Qwen3;
  else
    MICROLLM_FAIL("config", where, ": model_type '", type,
                  "' is not supported (supported: qwen2, llama, qwen3)");

  c.vocab_size = f.integer("vocab_size");
  c.hidden_size = f.integer("hidden_size");
  c.intermediate_size = f.integer("intermediate_size");
  c.num_layers = f.integer("num_hidden_layers");
  c.num_heads = f.integer("num_attention_heads");
  c.num_kv_heads = f.integer_or("num_key_value_heads", c.num_heads);
  c.head_dim = f.integer_or("head_dim", c.num_heads > 0 ? c.hidden_size / c.num_heads : 0);
  c.max_position_embeddings = f.integer_or("max_position_embeddings", 0);
  c.rms_norm_eps = f.number_or("rms_norm_eps", 1e-6);
  c.tie_word_embeddings = f.boolean_or("tie_word_embeddings", false);
  c.bos_token_id = f.integer_or("bos_token_id", -1);
  if (f.has("eos_token_id")) {
    const json& eos = f.at("eos_token_id");
    if (eos.is_array()) {
      for (const json& e : eos) {
        MICROLLM_CHECK(e.is_number_integer(), "config", where,
                       ": eos_token_id entries must be integers");
        c.eos_token_ids.push_back(e.get<int64_t>());
      }
    } else {
      c.eos_token_ids.push_back(f.integer("eos_token_id"));
    }
  }

  // RoPE: transformers 5 writes rope_parameters; 4 writes rope_theta + rope_scaling.
  if (f.has("rope_parameters")) {
    const json& p = f.at("rope_parameters");
    c.rope_scaling = parse_rope_scaling(p, where);
    c.rope_theta = Fields(p, where).number("rope_theta");
  } else {
    c.rope_theta = f.number_or("rope_theta", 10000.0);
    if (f.has("rope_scaling")) c.rope_scaling = parse_rope_scaling(f.at("rope_scaling"), where);
  }

  // What each family means by its switches.
  f.expect("hidden_act", "silu", "the MLP is SwiGLU");
  f.expect("use_sliding_window", false, "sliding-window attention is not implemented");
  f.expect("use_mrope", false, "multimodal RoPE is not implemented");
  f.expect("mlp_bias", false, "MLP projections have no bias in microllm");
  f.expect("pretraining_tp", 1, "tensor-parallel pretraining splits are not implemented");
  if (f.has("layer_types")) {
    for (const json& t : f.at("layer_types"))
      MICROLLM_CHECK(t == "full_attention", "config", where, ": layer_types entry ", t.dump(),
                     " is not supported (only full_attention)");
  }
  if (c.family == Family::Qwen2) {
    c.qkv_bias = true;  // Qwen2 always has q/k/v biases and no o_proj bias
  } else {
    // In llama and qwen3, attention_bias adds biases to q, k, v and o_proj.
    f.expect("attention_bias", false, "o_proj biases are not implemented");
  }
  c.qk_norm = c.family == Family::Qwen3;
  c.validate(where);
  return c;
}

ModelConfig ModelConfig::load(const std::string& path) {
  std::filesystem::path p(path);
  if (std::filesystem::is_directory(p)) p /= "config.json";
  std::ifstream in(p);
  MICROLLM_CHECK(in.good(), "config", "cannot open ", p.string());
  json j;
  try {
    j = json::parse(in);
  } catch (const json::exception& e) {
    MICROLLM_FAIL("config", p.string(), ": invalid JSON: ", e.what());
  }
  return from_json(j, p.string());
}

void ModelConfig::validate(const std::string& where) const {
  auto positive = [&](int64_t v, const char* name) {
    MICROLLM_CHECK(v > 0, "config", where, ": ", name, " must be positive, found ", v);
  };
  positive(vocab_size, "vocab_size");
  positive(hidden_size, "hidden_size");
  positive(intermediate_size, "intermediate_size");
  positive(num_layers, "num_hidden_layers");
  positive(num_heads, "num_attention_heads");
  positive(num_kv_heads, "num_key_value_heads");
  positive(head_dim, "head_dim");
  MICROLLM_CHECK(num_heads % num_kv_heads == 0, "config", where, ": num_attention_heads ",
                 num_heads, " is not a multiple of num_key_value_heads ", num_kv_heads);
  MICROLLM_CHECK(head_dim % 2 == 0, "config", where, ": head_dim must be even for RoPE, found ",
                 head_dim);
  MICROLLM_CHECK(rope_theta > 0, "config", where, ": rope_theta must be positive, found ",
                 rope_theta);
  MICROLLM_CHECK(rms_norm_eps > 0, "config", where, ": rms_norm_eps must be positive, found ",
                 rms_norm_eps);
}

const char* ModelConfig::model_type() const {
  switch (family) {
    case Family::Qwen2:
      return "qwen2";
    case Family::Llama:
      return "llama";
    case Family::Qwen3:
      return "qwen3";
  }
  return "unknown";
}

json ModelConfig::to_json() const {
  json j;
  const char* architecture = family == Family::Qwen2   ? "Qwen2ForCausalLM"
                             : family == Family::Llama ? "LlamaForCausalLM"
                                                       : "Qwen3ForCausalLM";
  j["architectures"] = {architecture};
  j["model_type"] = model_type();
  j["vocab_size"] = vocab_size;
  j["hidden_size"] = hidden_size;
  j["intermediate_size"] = intermediate_size;
  j["num_hidden_layers"] = num_layers;
  j["num_attention_heads"] = num_heads;
  j["num_key_value_heads"] = num_kv_heads;
  j["head_dim"] = head_dim;
  j["max_position_embeddings"] = max_position_embeddings;
  j["rope_theta"] = rope_theta;
  j["rms_norm_eps"] = rms_norm_eps;
  j["tie_word_embeddings"] = tie_word_embeddings;
  j["hidden_act"] = "silu";
  if (family != Family::Qwen2) j["attention_bias"] = false;
  if (bos_token_id >= 0) j["bos_token_id"] = bos_token_id;
  if (eos_token_ids.size() == 1)
    j["eos_token_id"] = eos_token_ids[0];
  else if (!eos_token_ids.empty())
    j["eos_token_id"] = eos_token_ids;
  switch (rope_scaling.type) {
    case RopeScaling::Type::None:
      j["rope_scaling"] = nullptr;
      break;
    case RopeScaling::Type::Linear:
      j["rope_scaling"] = {{"rope_type", "linear"}, {"factor", rope_scaling.factor}};
      break;
    case RopeScaling::Type::Llama3:
      j["rope_scaling"] = {
          {"rope_type", "llama3"},
          {"factor", rope_scaling.factor},
          {"low_freq_factor", rope_scaling.low_freq_factor},
          {"high_freq_factor", rope_scaling.high_freq_factor},
          {"original_max_position_embeddings", rope_scaling.original_max_position_embeddings}};
      break;
  }
  j["torch_dtype"] = "float32";
  return j;
}

std::vector<ParameterSpec> parameter_specs(const ModelConfig& c) {
  const int64_t C = c.hidden_size, F = c.intermediate_size, D = c.head_dim;
  std::vector<ParameterSpec> specs;
  specs.push_back({"model.embed_tokens.weight", {c.vocab_size, C}});
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    specs.push_back({p + "input_layernorm.weight", {C}});
    specs.push_back({p + "self_attn.q_proj.weight", {c.q_dim(), C}});
    if (c.qkv_bias) specs.push_back({p + "self_attn.q_proj.bias", {c.q_dim()}});
    specs.push_back({p + "self_attn.k_proj.weight", {c.kv_dim(), C}});
    if (c.qkv_bias) specs.push_back({p + "self_attn.k_proj.bias", {c.kv_dim()}});
    specs.push_back({p + "self_attn.v_proj.weight", {c.kv_dim(), C}});
    if (c.qkv_bias) specs.push_back({p + "self_attn.v_proj.bias", {c.kv_dim()}});
    if (c.qk_norm) {
      specs.push_back({p + "self_attn.q_norm.weight", {D}});
      specs.push_back({p + "self_attn.k_norm.weight", {D}});
    }
    specs.push_back({p + "self_attn.o_proj.weight", {C, c.q_dim()}});
    specs.push_back({p + "post_attention_layernorm.weight", {C}});
    specs.push_back({p + "mlp.gate_proj.weight", {F, C}});
    specs.push_back({p + "mlp.up_proj.weight", {F, C}});
    specs.push_back({p + "mlp.down_proj.weight", {C, F}});
  }
  specs.push_back({"model.norm.weight", {C}});
  if (!c.tie_word_embeddings) specs.push_back({"lm_head.weight", {c.vocab_size, C}});
  return specs;
}

int64_t parameter_count(const ModelConfig& config) {
  int64_t total = 0;
  for (const ParameterSpec& s : parameter_specs(config)) total += shape_numel(s.shape);
  return total;
}

int64_t kv_cache_bytes_per_token(const ModelConfig& c, int64_t element_bytes) {
  return 2 * c.num_layers * c.kv_dim() * element_bytes;
}

double forward_flops_per_token(const ModelConfig& c, int64_t context) {
  // Weight matrices: every parameter of rank 2 except the embedding lookup, plus the LM
  // head (tied or not).
  double matrix_weights = 0;
  for (const ParameterSpec& s : parameter_specs(c))
    if (s.shape.size() == 2 && s.name != "model.embed_tokens.weight")
      matrix_weights += static_cast<double>(shape_numel(s.shape));
  if (c.tie_word_embeddings) matrix_weights += static_cast<double>(c.vocab_size * c.hidden_size);
  // Attention: Q·Kᵀ and P·V over `context` keys, each 2·H·D FLOPs per key per layer.
  const double attention = 2.0 * 2.0 *
                           static_cast<double>(c.num_layers * c.num_heads * c.head_dim) *
                           static_cast<double>(context);
  return 2.0 * matrix_weights + attention;
}

Tensor rope_frequencies(const ModelConfig& c) {
  Tensor base = ops::rope_inv_freq(c.head_dim, c.rope_theta);  // (D/2) F32
  std::vector<float> freq = base.to_vector_f32();
  const RopeScaling& s = c.rope_scaling;
  if (s.type == RopeScaling::Type::Linear) {
    for (float& f : freq) f = f / static_cast<float>(s.factor);
  } else if (s.type == RopeScaling::Type::Llama3) {
    // Long wavelengths are slowed by `factor`, short ones kept, the band between blended.
    const float old_context = static_cast<float>(s.original_max_position_embeddings);
    const float low_wavelen = old_context / static_cast<float>(s.low_freq_factor);
    const float high_wavelen = old_context / static_cast<float>(s.high_freq_factor);
    const float factor = static_cast<float>(s.factor);
    for (float& f : freq) {
      const float wavelen = 2.0f * std::numbers::pi_v<float> / f;
      if (wavelen > low_wavelen) {
        f = f / factor;
      } else if (wavelen >= high_wavelen) {
        const float smooth = (old_context / wavelen - static_cast<float>(s.low_freq_factor)) /
                             static_cast<float>(s.high_freq_factor - s.low_freq_factor);
        f = (1.0f - smooth) * f / factor + smooth * f;
      }
    }
  }
  return Tensor::from_vector(freq, {static_cast<int64_t>(freq.size())});
}

}  // namespace microllm::model
