// The transformer on CUDA against the CPU reference, for a tiny model of each family:
// logits, next-token loss and every parameter gradient. F32 at SPEC §6 (whole-model
// logits 1e-4 × 5, gradients 1e-4 × 5 relative to the largest element); BF16 by relative
// L2 error and top-1 agreement.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "cuda/cuda_test_utils.h"
#include "microllm/model/transformer.h"
#include "microllm/ops/reduce.h"

using namespace microllm;
using microllm::testing::relative_l2;

namespace {

model::ModelConfig tiny(const std::string& family) {
  nlohmann::json j = {{"model_type", family},     {"vocab_size", 211},
                      {"hidden_size", 64},        {"intermediate_size", 96},
                      {"num_hidden_layers", 2},   {"num_attention_heads", 4},
                      {"num_key_value_heads", 2}, {"rms_norm_eps", 1e-6},
                      {"rope_theta", 10000.0},    {"tie_word_embeddings", family != "llama"}};
  if (family == "qwen3") j["head_dim"] = 32;
  if (family == "llama")
    j["rope_scaling"] = {{"rope_type", "llama3"},
                         {"factor", 8.0},
                         {"low_freq_factor", 1.0},
                         {"high_freq_factor", 4.0},
                         {"original_max_position_embeddings", 32}};
  return model::ModelConfig::from_json(j, family);
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  const std::vector<double> x = a.to_vector_f64(), y = b.to_vector_f64();
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i) worst = std::max(worst, std::fabs(x[i] - y[i]));
  return worst;
}

double max_abs(const Tensor& a) {
  double worst = 0;
  for (double v : a.to_vector_f64()) worst = std::max(worst, std::fabs(v));
  return worst;
}

void check_family(const std::string& family, DType dtype) {
  const model::ModelConfig config = tiny(family);
  model::Transformer gpu(config, Device::cuda(0), dtype, 11, 0.1);
  model::Transformer cpu(config, Device::cpu(), DType::F32, 11, 0.1);
  // Both start from the same values: the CPU copy of the (possibly BF16-rounded) weights.
  for (auto& [name, t] : cpu.parameters()) cpu.parameter(name).copy_from(gpu.parameters().at(name));
  cpu.set_requires_grad(true);
  gpu.set_requires_grad(true);
  Generator gen(5);
  const Tensor ids = randint({3, 37}, 0, config.vocab_size, gen);
  const Tensor cpu_logits = cpu.forward(ids);
  const Tensor gpu_logits = gpu.forward(ids.to(Device::cuda(0)));
  ASSERT_TRUE(gpu_logits.is_cuda());
  const Tensor cpu_loss = model::Transformer::next_token_loss(cpu_logits, ids);
  const Tensor gpu_loss = model::Transformer::next_token_loss(gpu_logits, ids.to(Device::cuda(0)));
  cpu_loss.backward();
  gpu_loss.backward();
  if (dtype == DType::F32) {
    EXPECT_LE(max_abs_diff(gpu_logits, cpu_logits), 5e-4) << family;
    EXPECT_NEAR(gpu_loss.item(), cpu_loss.item(), 5e-5) << family;
    for (const auto& [name, t] : cpu.parameters()) {
      const Tensor g = gpu.parameters().at(name).grad();
      ASSERT_TRUE(g.defined()) << name;
      EXPECT_LE(max_abs_diff(g, t.grad()) / std::max(max_abs(t.grad()), 1e-12), 5e-4)
          << family << " " << name;
    }
  } else {
    EXPECT_LE(relative_l2(gpu_logits, cpu_logits), 1e-2) << family;
    // Top-1 agreement of the predicted tokens.
    const std::vector<int64_t> a = ops::argmax(gpu_logits.to(DType::F32), -1).to_vector_i64();
    const std::vector<int64_t> b = ops::argmax(cpu_logits, -1).to_vector_i64();
    int64_t same = 0;
    for (size_t i = 0; i < a.size(); ++i) same += a[i] == b[i];
    EXPECT_GE(static_cast<double>(same) / static_cast<double>(a.size()), 0.95) << family;
    for (const auto& [name, t] : cpu.parameters()) {
      const Tensor g = gpu.parameters().at(name).grad();
      ASSERT_TRUE(g.defined()) << name;
      EXPECT_LE(relative_l2(g, t.grad()), 5e-2) << family << " " << name;
    }
  }
}

}  // namespace

TEST(CudaModel, Qwen2MatchesCpu) {
  MICROLLM_REQUIRE_CUDA();
  check_family("qwen2", DType::F32);
  check_family("qwen2", DType::BF16);
}

TEST(CudaModel, LlamaMatchesCpu) {
  MICROLLM_REQUIRE_CUDA();
  check_family("llama", DType::F32);
  check_family("llama", DType::BF16);
}

TEST(CudaModel, Qwen3MatchesCpu) {
  MICROLLM_REQUIRE_CUDA();
  check_family("qwen3", DType::F32);
  check_family("qwen3", DType::BF16);
}
