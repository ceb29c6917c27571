// The flat optimizer (DESIGN §5): over the views of a ModelWeights buffer, with gradients
// accumulated in place into a flat gradient buffer, AdamW (reference and fused kernels) and
// SGD give the bits of the per-tensor optimizer over separately allocated parameters; its
// one-reduction gradient norm equals an F64 sum and falls back to the tensors when a
// gradient is missing; the fused AdamW's kept tensors are rebuilt when a gradient is missing;
// coalesce_adamw merges only true neighbours; the trainer is flat.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "microllm/autograd/node.h"
#include "microllm/core/random.h"
#include "microllm/model/transformer.h"
#include "microllm/model/weights.h"
#include "microllm/ops/elementwise.h"
#include "microllm/train/trainer.h"
#include "model/tiny_config.h"
#include "ops/op_test_util.h"
#include "support/scoped_env.h"
#include "train/flat_and_plain_models.h"

using namespace microllm;
using microllm::testing::optest::same_bits;

namespace {

// The tiny qwen2 model (QKV bias) with an untied LM head, or another family's.
model::ModelConfig tiny_config(model::Family family = model::Family::Qwen2) {
  model::ModelConfig c = microllm::testing::tiny_config(family);
  c.tie_word_embeddings = false;
  return c;
}

Tensor random_ids(uint64_t seed) {
  Generator gen(seed);
  std::vector<int64_t> ids(2 * 9);                                         // (2, 9)
  for (int64_t& id : ids) id = static_cast<int64_t>(gen.next_u64() % 37);  // the vocabulary
  return Tensor::from_vector(ids, {2, 9}, DType::I64);
}

// Half the next-token loss of `ids`, backward: two of these make one accumulated step.
void accumulate(const model::Transformer& model, const Tensor& ids) {
  const Tensor logits = model.forward(ids);  // (2, 9, V)
  ops::scale(model::Transformer::next_token_loss(logits, ids), 0.5).backward();
}

// √(Σ g²) in F64 over the parameters' gradients.
double f64_norm(const std::map<std::string, Tensor>& params) {
  double sum = 0;
  for (const auto& [name, p] : params)
    if (p.grad().defined())
      for (double g : p.grad().to_vector_f64()) sum += g * g;
  return std::sqrt(sum);
}

void drop_grads(const std::map<std::string, Tensor>& params) {
  for (const auto& [name, p] : params) {
    Tensor t = p;  // a handle to the same parameter
    t.zero_grad();
  }
}

}  // namespace

TEST(FlatOptimizer, GivesTheBitsOfThePerTensorOptimizer) {
  struct Case {
    std::string kind;
    bool fused;
  };
  for (model::Family family : {model::Family::Qwen2, model::Family::Qwen3, model::Family::Llama})
    for (DType dtype : {DType::F32, DType::BF16}) {
      for (const Case& c : {Case{"adamw", false}, Case{"adamw", true}, Case{"sgd", false}}) {
        SCOPED_TRACE(c.kind + (c.fused ? " fused " : " ") + std::string(dtype_name(dtype)) +
                     " family " + std::to_string(static_cast<int>(family)));
        const microllm::testing::FlatAndPlainModels models =
            microllm::testing::flat_and_plain_models(tiny_config(family), Device::cpu(), dtype, 5);
        const model::ModelWeights& weights = models.weights;
        const model::Transformer& flat_model = models.flat;
        const model::Transformer& plain_model = models.plain;
        for (const auto& [name, p] : plain_model.parameters())
          ASSERT_TRUE(same_bits(p, flat_model.parameters().at(name))) << name;

        train::AdamWOptions adamw;
        adamw.fused = c.fused;
        train::SgdOptions sgd;
        sgd.weight_decay = 0.01;
        auto flat = train::make_optimizer(c.kind, train::optimizer_params(flat_model.parameters()),
                                          adamw, sgd, weights.flat());
        auto plain = train::make_optimizer(
            c.kind, train::optimizer_params(plain_model.parameters()), adamw, sgd);
        EXPECT_TRUE(flat->flat());
        EXPECT_FALSE(plain->flat());
        for (int step = 1; step <= 3; ++step) {
          for (int micro = 0; micro < 2; ++micro) {
            accumulate(flat_model, random_ids(10 * step + micro));
            accumulate(plain_model, random_ids(10 * step + micro));
          }
          for (const auto& [name, p] : flat_model.parameters()) {
            ASSERT_TRUE(p.grad().same(p.grad_buffer())) << name;
            ASSERT_TRUE(same_bits(p.grad(), plain_model.parameters().at(name).grad())) << name;
          }
          const double want = f64_norm(plain_model.parameters());
          const double norm = plain->gradient_norm();
          EXPECT_NEAR(flat->gradient_norm(), want, 1e-5 * want);
          EXPECT_NEAR(norm, want, 1e-5 * want);
          // The same clip for both, from one norm: the updates must then agree bit for bit.
          const double scale = train::clip_scale(norm, step == 2 ? 0.5 * norm : 0.0);
          flat->set_grad_scale(scale);
          plain->set_grad_scale(scale);
          flat->step(1e-2);
          plain->step(1e-2);
          flat->zero_grad();
          plain->zero_grad();
        }
        for (const auto& [name, p] : plain_model.parameters())
          EXPECT_TRUE(same_bits(p, flat_model.parameters().at(name))) << name;
        const train::NamedTensors a = plain->state(), b = flat->state();
        ASSERT_EQ(a.size(), b.size());
        for (size_t i = 0; i < a.size(); ++i) {
          EXPECT_EQ(a[i].first, b[i].first);
          EXPECT_TRUE(same_bits(a[i].second, b[i].second)) << a[i].first;
        }
      }
    }
}

// The fused AdamW keeps its coalesced tensors while every gradient is its flat view; a step
// where one parameter has no gradient must rebuild them (that parameter and its moments stay
// as they are), and the next full step too: the bits of the per-tensor fused optimizer at
// every step.
TEST(FlatOptimizer, FusedAdamWRebuildsItsTensorsWhenAGradientIsMissing) {
  const microllm::testing::FlatAndPlainModels models =
      microllm::testing::flat_and_plain_models(tiny_config(), Device::cpu(), DType::F32, 7);
  const model::ModelWeights& weights = models.weights;
  const model::Transformer& flat_model = models.flat;
  const model::Transformer& plain_model = models.plain;
  train::AdamWOptions options;
  options.fused = true;
  train::AdamW flat(train::optimizer_params(flat_model.parameters()), options, weights.flat());
  train::AdamW plain(train::optimizer_params(plain_model.parameters()), options);
  for (int step = 1; step <= 4; ++step) {
    accumulate(flat_model, random_ids(20 + step));
    accumulate(plain_model, random_ids(20 + step));
    if (step == 2 || step == 3) {  // the LM head (step 2) or a norm (step 3) without a gradient
      const std::string name = step == 2 ? "lm_head.weight" : "model.norm.weight";
      Tensor(flat_model.parameters().at(name)).zero_grad();
      Tensor(plain_model.parameters().at(name)).zero_grad();
    }
    flat.step(1e-2);
    plain.step(1e-2);
    for (const auto& [name, p] : plain_model.parameters())
      ASSERT_TRUE(same_bits(p, flat_model.parameters().at(name))) << "step " << step << " " << name;
    flat.zero_grad();
    plain.zero_grad();
  }
  const train::NamedTensors a = plain.state(), b = flat.state();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_TRUE(same_bits(a[i].second, b[i].second)) << a[i].first;
}

TEST(FlatOptimizer, GradientNormSkipsAMissingGradientsStaleView) {
  const model::ModelWeights weights =
      model::ModelWeights::random(tiny_config(), Device::cpu(), DType::F32, 6);
  const model::Transformer model = model::Transformer::from_weights(weights);
  for (const auto& [name, p] : model.parameters()) Tensor(p).set_requires_grad(true);
  train::AdamW optimizer(train::optimizer_params(model.parameters()), {}, weights.flat());
  accumulate(model, random_ids(1));
  const double full = f64_norm(model.parameters());
  EXPECT_NEAR(optimizer.gradient_norm(), full, 1e-5 * full);
  // The LM head's view keeps its values, but without a gradient it must not count.
  Tensor head = model.parameters().at("lm_head.weight");
  head.zero_grad();
  const double rest = f64_norm(model.parameters());
  ASSERT_LT(rest, 0.999 * full);
  EXPECT_NEAR(optimizer.gradient_norm(), rest, 1e-5 * rest);
  drop_grads(model.parameters());
  EXPECT_EQ(optimizer.gradient_norm(), 0.0);
}

TEST(FlatOptimizer, CoalesceMergesOnlyNeighbours) {
  // Five flat buffers; views [0, 3) and [3, 5) touch, [6, 10) follows a gap, [10, 12) touches
  // but has no decay, and a separate tensor lives elsewhere.
  Generator gen(3);
  auto filled = [&](int64_t n) {
    std::vector<double> v(static_cast<size_t>(n));
    for (double& x : v) x = 0.5 + gen.next_uniform();
    return Tensor::from_vector(v, {n}, DType::F32);
  };
  const Tensor param = filled(12), grad = filled(12), m = filled(12), v = filled(12);
  auto entry = [&](int64_t start, int64_t n, bool decay) {
    return ops::AdamWTensors{param.narrow(0, start, n), grad.narrow(0, start, n),
                             param.narrow(0, start, n), m.narrow(0, start, n),
                             v.narrow(0, start, n),     decay};
  };
  const Tensor lone = filled(4);
  const ops::AdamWTensors separate{lone, filled(4), lone, filled(4), filled(4), true};
  const std::vector<ops::AdamWTensors> list = {entry(6, 4, true), entry(3, 2, true), separate,
                                               entry(10, 2, false), entry(0, 3, true)};
  const std::vector<ops::AdamWTensors> merged = train::coalesce_adamw(list);
  ASSERT_EQ(merged.size(), 4u);
  std::vector<int64_t> sizes;
  for (const ops::AdamWTensors& t : merged) sizes.push_back(t.param.numel());
  std::sort(sizes.begin(), sizes.end());
  EXPECT_EQ(sizes, (std::vector<int64_t>{2, 4, 4, 5}));
  // The merged update is the update of the list, element for element.
  std::vector<ops::AdamWTensors> copies;
  for (const ops::AdamWTensors& t : list)
    copies.push_back({t.param.clone(), t.grad.clone(), Tensor(), t.exp_avg.clone(),
                      t.exp_avg_sq.clone(), t.decay});
  for (ops::AdamWTensors& t : copies) t.master = t.param;
  ops::AdamWScalars s;
  s.lr = 0.1;
  s.weight_decay = 0.2;
  s.bias1 = 0.5;
  s.bias2 = 0.25;
  ops::adamw_step(merged, s);
  ops::adamw_step(copies, s);
  for (size_t i = 0; i < list.size(); ++i) {
    EXPECT_TRUE(same_bits(list[i].param, copies[i].param)) << i;
    EXPECT_TRUE(same_bits(list[i].exp_avg, copies[i].exp_avg)) << i;
    EXPECT_TRUE(same_bits(list[i].exp_avg_sq, copies[i].exp_avg_sq)) << i;
  }
}

TEST(FlatOptimizer, ProjectionGradientsAreWrittenIntoTheirBuffersWithTheSameBits) {
  // MICROLLM_GRAD_INTO_BUFFER=1: the gradient of every projection weight and of the (untied)
  // LM head is written by its product into its claimed buffer (Q/K/V and gate/up through one
  // joined view each); the embedding and the norms keep the copy. The gradients over two
  // accumulated micro-batches are those of the same model without claims, bit for bit.
  for (model::Family family : {model::Family::Qwen2, model::Family::Qwen3, model::Family::Llama})
    for (DType dtype : {DType::F32, DType::BF16}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " family " +
                   std::to_string(static_cast<int>(family)));
      std::map<std::string, Tensor> grads[2];  // [claims off, on]
      for (int claims : {0, 1}) {
        const microllm::testing::ScopedEnv env("MICROLLM_GRAD_INTO_BUFFER", claims ? "1" : "0");
        const model::ModelWeights weights =
            model::ModelWeights::random(tiny_config(family), Device::cpu(), dtype, 5);
        const model::Transformer flat_model = model::Transformer::from_weights(weights);
        for (const auto& [name, p] : flat_model.parameters()) Tensor(p).set_requires_grad(true);
        auto flat =
            train::make_optimizer("adamw", train::optimizer_params(flat_model.parameters()),
                                  train::AdamWOptions{}, train::SgdOptions{}, weights.flat());
        accumulate(flat_model, random_ids(1));
        for (const auto& [name, p] : flat_model.parameters()) {
          const bool product = name.ends_with("proj.weight") || name == "lm_head.weight";
          EXPECT_EQ(p.impl()->autograd.grad_buffer_claimed, claims == 1 && product) << name;
        }
        accumulate(flat_model, random_ids(2));
        for (const auto& [name, p] : flat_model.parameters()) {
          ASSERT_TRUE(p.grad().same(p.grad_buffer())) << name;
          grads[claims][name] = p.grad().clone();
        }
      }
      for (const auto& [name, g] : grads[0]) EXPECT_TRUE(same_bits(grads[1].at(name), g)) << name;
    }
}

TEST(FlatOptimizer, TheTrainerIsFlat) {
  train::TrainOptions o;
  o.steps = 1;
  o.seq = 4;
  o.batch = 1;
  train::Trainer trainer(tiny_config(), o);
  EXPECT_TRUE(trainer.optimizer().flat());
  for (const auto& [name, p] : trainer.model().parameters())
    EXPECT_TRUE(p.grad_buffer().defined()) << name;
}

TEST(BadInput, FlatOptimizer) {
  const model::ModelWeights weights =
      model::ModelWeights::random(tiny_config(), Device::cpu(), DType::F32, 6);
  const model::Transformer model = model::Transformer::from_weights(weights);
  std::vector<train::OptimizerParam> params = train::optimizer_params(model.parameters());
  params.emplace_back("outsider", Tensor::zeros({3}), false);
  EXPECT_ERROR(train::AdamW(params, {}, weights.flat()), "optimizer",
               {"parameter outsider (f32(3,) cpu) is not a dense view of the flat parameter "
                "buffer"});
  params.pop_back();
  params.emplace_back("transposed", model.parameters().at("lm_head.weight").transpose(0, 1), true);
  EXPECT_ERROR(train::Sgd(params, {}, weights.flat()), "optimizer", {"parameter transposed"});
  EXPECT_ERROR(
      train::AdamW(train::optimizer_params(model.parameters()), {}, weights.flat().view({1, -1})),
      "optimizer", {"the flat parameter buffer must be a dense floating (P) tensor"});
}
