// The flat optimizer on CUDA: a BF16 model whose parameters are views of one ModelWeights
// buffer, gradients accumulated in place into the flat gradient buffer over two micro-batches,
// the fused AdamW over coalesced views: the same gradients, parameters and state bits as the
// per-tensor optimizer over separately allocated parameters, and a one-reduction gradient
// norm within F32 rounding of the per-tensor one.
#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <tuple>
#include <utility>

#include "cuda/cuda_test_utils.h"
#include "microllm/core/random.h"
#include "microllm/model/transformer.h"
#include "microllm/model/weights.h"
#include "microllm/ops/elementwise.h"
#include "microllm/train/optimizer.h"
#include "support/scoped_env.h"
#include "train/flat_and_plain_models.h"

using namespace microllm;
using microllm::testing::bit_equal;

namespace {

model::ModelConfig small_config() {
  return model::ModelConfig::from_json({{"model_type", "qwen2"},
                                        {"vocab_size", 300},
                                        {"hidden_size", 128},
                                        {"intermediate_size", 320},
                                        {"num_hidden_layers", 2},
                                        {"num_attention_heads", 2},
                                        {"num_key_value_heads", 1},
                                        {"rms_norm_eps", 1e-6},
                                        {"rope_theta", 10000.0},
                                        {"tie_word_embeddings", true}},
                                       "small");
}

Tensor random_ids(uint64_t seed, Device device) {
  Generator gen(seed);
  std::vector<int64_t> ids(4 * 64);  // (4, 64)
  for (int64_t& id : ids) id = static_cast<int64_t>(gen.next_u64() % 300);
  return Tensor::from_vector(ids, {4, 64}, DType::I64, device);
}

}  // namespace

TEST(CudaFlatOptimizer, GivesTheBitsOfThePerTensorOptimizer) {
  MICROLLM_REQUIRE_CUDA();
  const Device gpu = Device::cuda(0);
  const microllm::testing::FlatAndPlainModels models =
      microllm::testing::flat_and_plain_models(small_config(), gpu, DType::BF16, 9);
  const model::ModelWeights& weights = models.weights;
  const model::Transformer& flat_model = models.flat;
  const model::Transformer& plain_model = models.plain;
  train::AdamWOptions options;
  options.fused = true;
  train::AdamW flat(train::optimizer_params(flat_model.parameters()), options, weights.flat());
  train::AdamW plain(train::optimizer_params(plain_model.parameters()), options);
  for (int step = 1; step <= 2; ++step) {
    for (int micro = 0; micro < 2; ++micro) {
      for (const model::Transformer* m : {&flat_model, &std::as_const(plain_model)}) {
        const Tensor ids = random_ids(10 * step + micro, gpu);  // (4, 64)
        ops::scale(model::Transformer::next_token_loss(m->forward(ids), ids), 0.5).backward();
      }
    }
    for (const auto& [name, p] : flat_model.parameters()) {
      ASSERT_TRUE(p.grad().same(p.grad_buffer())) << name;
      ASSERT_TRUE(bit_equal(p.grad(), plain_model.parameters().at(name).grad())) << name;
    }
    const double norm = plain.gradient_norm();
    EXPECT_NEAR(flat.gradient_norm(), norm, 1e-5 * norm);
    const double scale = train::clip_scale(norm, 0.5 * norm);
    flat.set_grad_scale(scale);
    plain.set_grad_scale(scale);
    flat.step(1e-3);
    plain.step(1e-3);
    flat.zero_grad();
    plain.zero_grad();
  }
  for (const auto& [name, p] : plain_model.parameters())
    EXPECT_TRUE(bit_equal(p, flat_model.parameters().at(name))) << name;
  const train::NamedTensors a = plain.state(), b = flat.state();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_TRUE(bit_equal(a[i].second, b[i].second)) << a[i].first;
}

namespace {

// One backward pass of the small tied BF16 model over one ModelWeights buffer, with the
// fused AdamW's flat gradient buffer attached, under the switches the caller has set: every
// parameter's gradient (a copy) and the device-to-device copies the pass made.
std::pair<std::map<std::string, Tensor>, int64_t> flat_model_backward(const Device& gpu) {
  const model::ModelWeights weights =
      model::ModelWeights::random(small_config(), gpu, DType::BF16, 9);
  const model::Transformer model = model::Transformer::from_weights(weights);
  for (const auto& [name, p] : model.parameters()) Tensor(p).set_requires_grad(true);
  train::AdamWOptions options;
  options.fused = true;
  train::AdamW adamw(train::optimizer_params(model.parameters()), options, weights.flat());
  const Tensor ids = random_ids(3, gpu);                                             // (4, 64)
  const Tensor loss = model::Transformer::next_token_loss(model.forward(ids), ids);  // ()
  cuda::reset_transfer_stats();
  loss.backward();
  const int64_t copies = cuda::transfer_stats().d2d_calls;
  std::map<std::string, Tensor> grads;
  for (const auto& [name, p] : model.parameters()) grads[name] = p.grad().clone();
  return {grads, copies};
}

}  // namespace

TEST(CudaFlatOptimizer, ClaimedGradientBuffersSaveTheCopiesWithTheSameBits) {
  // MICROLLM_GRAD_INTO_BUFFER=1: each layer's seven projection weights (Q/K/V and gate/up
  // claimed through one joined view each, O and down alone) get their gradients written by
  // their products, so seven device-to-device copies a layer fewer in a backward pass; the
  // tied embedding still takes its sum's copy. The gradients keep their bits.
  MICROLLM_REQUIRE_CUDA();
  const Device gpu = Device::cuda(0);
  std::map<std::string, Tensor> grads[2];  // [claims off, on]
  int64_t copies[2] = {0, 0};
  // The tied embedding's add into the pending buffer would save one more copy.
  const microllm::testing::ScopedEnv no_adds("MICROLLM_ADD_INTO_BUFFER", "0");
  for (int claims : {0, 1}) {
    const microllm::testing::ScopedEnv env("MICROLLM_GRAD_INTO_BUFFER", claims ? "1" : "0");
    std::tie(grads[claims], copies[claims]) = flat_model_backward(gpu);
  }
  EXPECT_EQ(copies[0] - copies[1], 7 * small_config().num_layers)
      << "copies without claims " << copies[0] << ", with " << copies[1];
  for (const auto& [name, g] : grads[0]) EXPECT_TRUE(bit_equal(grads[1].at(name), g)) << name;
}

TEST(CudaFlatOptimizer, TiedEmbeddingAddsIntoThePendingBufferWithTheSameValues) {
  // MICROLLM_ADD_INTO_BUFFER=1: the tied embedding's lookup adds the rows its ids name into
  // the LM head's claimed gradient (embedding_backward_add_cuda) instead of handing the
  // engine a dense (V, C) gradient whose sum is then copied back: one device-to-device copy
  // fewer, and every gradient equal in value (an unnamed row of the embedding may keep a −0
  // that the engine's 0 + (−0) would have made +0, so values are compared, not bits).
  MICROLLM_REQUIRE_CUDA();
  const Device gpu = Device::cuda(0);
  std::map<std::string, Tensor> grads[2];  // [adds off, on]
  int64_t copies[2] = {0, 0};
  for (int adds : {0, 1}) {
    const microllm::testing::ScopedEnv claims("MICROLLM_GRAD_INTO_BUFFER", "1");
    const microllm::testing::ScopedEnv env("MICROLLM_ADD_INTO_BUFFER", adds ? "1" : "0");
    std::tie(grads[adds], copies[adds]) = flat_model_backward(gpu);
  }
  EXPECT_EQ(copies[0] - copies[1], 1)
      << "copies without adds " << copies[0] << ", with " << copies[1];
  for (const auto& [name, g] : grads[0]) {
    const std::vector<float> a = grads[1].at(name).to_vector_f32(), b = g.to_vector_f32();
    ASSERT_EQ(a.size(), b.size()) << name;
    int64_t differ = 0;
    for (size_t i = 0; i < a.size(); ++i) differ += a[i] != b[i];  // −0 == +0
    EXPECT_EQ(differ, 0) << name;
  }
}
