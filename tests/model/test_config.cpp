// ModelConfig: the public config.json fixtures parse, their parameter counts and KV-cache
// sizes are right, both transformers config layouts are read, and every unsupported value
// is one clear error naming the field.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "microllm/model/config.h"

using namespace microllm;
using model::ModelConfig;
using nlohmann::json;

namespace {

const std::string kFixtures = std::string(MICROLLM_SOURCE_DIR) + "/tests/fixtures/configs/";

json fixture(const std::string& name) {
  std::ifstream in(kFixtures + name + "/config.json");
  return json::parse(in);
}

// The error message of parsing `j`, or "" when it parses.
std::string parse_error(const json& j) {
  try {
    ModelConfig::from_json(j, "test.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(ModelConfig, PublicFixturesGiveThePublishedParameterCounts) {
  // Counts published by the issue (Qwen2.5-0.5B, DeepSeek-R1-Distill-Qwen-1.5B) and by the
  // model cards (Llama 3.2 1B: 1.24B, Qwen2.5-1.5B: 1.54B, Qwen3-0.6B: 0.6B / 0.44B
  // non-embedding), checked here to the parameter.
  EXPECT_EQ(model::parameter_count(ModelConfig::load(kFixtures + "qwen2.5-0.5b")), 494032768);
  EXPECT_EQ(model::parameter_count(ModelConfig::load(kFixtures + "deepseek-r1-distill-qwen-1.5b")),
            1777088000);
  EXPECT_EQ(model::parameter_count(ModelConfig::load(kFixtures + "qwen2.5-1.5b")), 1543714304);
  EXPECT_EQ(model::parameter_count(ModelConfig::load(kFixtures + "llama-3.2-1b")), 1235814400);
  const ModelConfig qwen3 = ModelConfig::load(kFixtures + "qwen3-0.6b");
  EXPECT_EQ(model::parameter_count(qwen3), 596049920);
  EXPECT_EQ(model::parameter_count(qwen3) - qwen3.vocab_size * qwen3.hidden_size, 440467456);
}

TEST(ModelConfig, FamiliesAndTheirSwitches) {
  const ModelConfig qwen2 = ModelConfig::load(kFixtures + "qwen2.5-0.5b");
  EXPECT_EQ(qwen2.family, model::Family::Qwen2);
  EXPECT_TRUE(qwen2.qkv_bias);
  EXPECT_FALSE(qwen2.qk_norm);
  EXPECT_EQ(qwen2.head_dim, 64);  // 896 / 14
  EXPECT_TRUE(qwen2.tie_word_embeddings);
  const ModelConfig llama = ModelConfig::load(kFixtures + "llama-3.2-1b");
  EXPECT_EQ(llama.family, model::Family::Llama);
  EXPECT_FALSE(llama.qkv_bias);
  EXPECT_EQ(llama.rope_scaling.type, model::RopeScaling::Type::Llama3);
  EXPECT_EQ(llama.rope_scaling.factor, 32.0);
  EXPECT_EQ(llama.rope_scaling.original_max_position_embeddings, 8192);
  const ModelConfig qwen3 = ModelConfig::load(kFixtures + "qwen3-0.6b");
  EXPECT_TRUE(qwen3.qk_norm);
  EXPECT_EQ(qwen3.head_dim, 128);  // explicit, not 1024 / 16
  const ModelConfig deepseek = ModelConfig::load(kFixtures + "deepseek-r1-distill-qwen-1.5b");
  EXPECT_FALSE(deepseek.tie_word_embeddings);
  EXPECT_EQ(deepseek.rope_theta, 10000.0);
}

TEST(ModelConfig, KvCacheBytesAndFlops) {
  const ModelConfig c = ModelConfig::load(kFixtures + "qwen2.5-0.5b");
  // K and V, 24 layers, 2 KV heads of 64, 2 bytes each.
  EXPECT_EQ(model::kv_cache_bytes_per_token(c, 2), 2 * 24 * 2 * 64 * 2);
  // At context 0 the FLOPs are 2 per weight of every matrix, the tied LM head counted:
  // all parameters minus biases and norm weights (the embedding appears once as the head).
  int64_t vectors = 0;
  for (const auto& spec : model::parameter_specs(c))
    if (spec.shape.size() == 1) vectors += spec.shape[0];
  EXPECT_DOUBLE_EQ(model::forward_flops_per_token(c, 0),
                   2.0 * static_cast<double>(model::parameter_count(c) - vectors));
  // Each context token adds Q·Kᵀ and P·V: 4·L·H·D.
  EXPECT_DOUBLE_EQ(model::forward_flops_per_token(c, 1) - model::forward_flops_per_token(c, 0),
                   4.0 * 24 * 14 * 64);
}

TEST(ModelConfig, ParameterNamesFollowHuggingFace) {
  const auto specs = model::parameter_specs(ModelConfig::load(kFixtures + "qwen3-0.6b"));
  auto has = [&](const std::string& name, const Shape& shape) {
    for (const auto& s : specs)
      if (s.name == name) return s.shape == shape;
    return false;
  };
  EXPECT_TRUE(has("model.embed_tokens.weight", {151936, 1024}));
  EXPECT_TRUE(has("model.layers.0.self_attn.q_proj.weight", {2048, 1024}));
  EXPECT_TRUE(has("model.layers.27.self_attn.k_norm.weight", {128}));
  EXPECT_TRUE(has("model.layers.3.mlp.down_proj.weight", {1024, 3072}));
  EXPECT_TRUE(has("model.norm.weight", {1024}));
  EXPECT_FALSE(has("lm_head.weight", {151936, 1024}));  // tied
}

TEST(ModelConfig, TransformersFiveLayoutWithRopeParameters) {
  json j = fixture("qwen2.5-0.5b");
  j.erase("rope_theta");
  j["rope_parameters"] = {{"rope_theta", 1000000.0}, {"rope_type", "default"}};
  j["layer_types"] = json::array({"full_attention", "full_attention"});
  const ModelConfig c = ModelConfig::from_json(j, "v5.json");
  EXPECT_EQ(c.rope_theta, 1e6);
  EXPECT_EQ(c.rope_scaling.type, model::RopeScaling::Type::None);
  json linear = fixture("llama-3.2-1b");
  linear["rope_scaling"] = {{"type", "linear"}, {"factor", 4.0}};
  EXPECT_EQ(ModelConfig::from_json(linear, "linear.json").rope_scaling.type,
            model::RopeScaling::Type::Linear);
}

TEST(ModelConfig, JsonRoundTrip) {
  for (const char* name :
       {"qwen2.5-0.5b", "llama-3.2-1b", "qwen3-0.6b", "deepseek-r1-distill-qwen-1.5b"}) {
    const ModelConfig a = ModelConfig::load(kFixtures + name);
    const ModelConfig b = ModelConfig::from_json(a.to_json(), "round trip");
    EXPECT_EQ(b.to_json(), a.to_json()) << name;
    EXPECT_EQ(model::parameter_count(b), model::parameter_count(a)) << name;
  }
}

TEST(ModelConfig, LinearAndLlama3RopeFrequencies) {
  json j = fixture("llama-3.2-1b");
  const ModelConfig llama = ModelConfig::from_json(j, "llama");
  j["rope_scaling"] = nullptr;
  const std::vector<float> base =
      model::rope_frequencies(ModelConfig::from_json(j, "plain")).to_vector_f32();
  const std::vector<float> scaled = model::rope_frequencies(llama).to_vector_f32();
  ASSERT_EQ(base.size(), 32u);
  // Short wavelengths (< 8192 / 4 = 2048 positions) keep their frequency; long ones
  // (> 8192) are divided by 32; in between the two are blended.
  const double pi = 3.14159265358979323846;
  for (size_t i = 0; i < base.size(); ++i) {
    const double wavelen = 2 * pi / base[i];
    if (wavelen < 2048)
      EXPECT_EQ(scaled[i], base[i]) << i;
    else if (wavelen > 8192)
      EXPECT_FLOAT_EQ(scaled[i], base[i] / 32.0f) << i;
    else {
      EXPECT_LT(scaled[i], base[i]) << i;
      EXPECT_GT(scaled[i], base[i] / 32.0f) << i;
    }
  }
  j["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 4.0}};
  const std::vector<float> linear =
      model::rope_frequencies(ModelConfig::from_json(j, "linear")).to_vector_f32();
  for (size_t i = 0; i < base.size(); ++i) EXPECT_FLOAT_EQ(linear[i], base[i] / 4.0f);
}

TEST(ModelConfig, UnsupportedValuesAreClearErrors) {
  struct Case {
    const char* field;
    json value;
    const char* expect;
  };
  const std::vector<Case> cases = {
      {"model_type", "mistral", "model_type 'mistral' is not supported"},
      {"hidden_act", "gelu", "'hidden_act' is \"gelu\""},
      {"use_sliding_window", true, "sliding-window"},
      {"use_mrope", true, "'use_mrope'"},
      {"rope_scaling", {{"rope_type", "yarn"}, {"factor", 4.0}}, "rope scaling type 'yarn'"},
      {"num_key_value_heads", 3, "not a multiple of num_key_value_heads 3"},
      {"hidden_size", "896", "'hidden_size' must be an integer"},
      {"vocab_size", -5, "vocab_size must be positive"},
      {"layer_types", json::array({"sliding_attention"}),
       "layer_types entry \"sliding_attention\""},
  };
  for (const Case& c : cases) {
    json j = fixture("qwen2.5-0.5b");
    j[c.field] = c.value;
    const std::string message = parse_error(j);
    EXPECT_NE(message.find(c.expect), std::string::npos) << c.field << ": " << message;
    EXPECT_NE(message.find("test.json"), std::string::npos) << message;
  }
  json llama = fixture("llama-3.2-1b");
  llama["attention_bias"] = true;
  EXPECT_NE(parse_error(llama).find("'attention_bias'"), std::string::npos);
  json missing = fixture("qwen2.5-0.5b");
  missing.erase("num_hidden_layers");
  EXPECT_NE(parse_error(missing).find("missing required field 'num_hidden_layers'"),
            std::string::npos);
  try {
    ModelConfig::load("/nonexistent/config.json");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot open /nonexistent/config.json"),
              std::string::npos);
  }
}
