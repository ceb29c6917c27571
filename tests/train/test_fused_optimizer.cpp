// The fused optimizer path: ops::adamw_step gives the reference AdamW's bits (F32 and BF16
// parameters, weight decay on and off, a clip scale), ops::sum_of_squares against an F64
// sum, their errors, and the trainer with fused kernels: close to the reference kernels and
// resumable bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "microllm/core/random.h"
#include "microllm/ops/adamw.h"
#include "microllm/train/trainer.h"
#include "ops/op_test_util.h"

using namespace microllm;
using microllm::testing::optest::same_bits;
namespace fs = std::filesystem;

namespace {

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

Tensor random(const Shape& shape, uint64_t seed, DType dtype, double std = 1.0) {
  Generator gen(seed);
  std::vector<double> values(static_cast<size_t>(shape_numel(shape)));
  for (double& v : values) v = gen.next_normal() * std;
  return Tensor::from_vector(values, shape, DType::F64).to(dtype);
}

// Parameters of several shapes (a matrix, a vector, sizes around a 4096-element chunk).
std::map<std::string, Tensor> make_params(DType dtype) {
  return {{"a.weight", random({64, 70}, 1, dtype)},
          {"b.bias", random({70}, 2, dtype)},
          {"c.weight", random({3, 4097}, 3, dtype)},
          {"d.norm", random({5}, 4, dtype)}};
}

void set_grads(std::map<std::string, Tensor>& params, uint64_t seed) {
  for (auto& [name, p] : params) p.set_grad(random(p.shape(), seed++, p.dtype(), 0.1));
}

}  // namespace

TEST(FusedAdamW, GivesTheBitsOfTheReferenceOptimizer) {
  for (DType dtype : {DType::F32, DType::BF16}) {
    std::map<std::string, Tensor> ref_params = make_params(dtype),
                                  fused_params = make_params(dtype);
    train::AdamWOptions options;
    options.weight_decay = 0.1;
    train::AdamW reference(ref_params, options);
    options.fused = true;
    train::AdamW fused(fused_params, options);
    for (int step = 1; step <= 3; ++step) {
      set_grads(ref_params, 100 * step);
      set_grads(fused_params, 100 * step);
      if (step == 2) {  // a clip scale, as the trainer passes it
        reference.set_grad_scale(0.37);
        fused.set_grad_scale(0.37);
      }
      reference.step(1e-2 * step);
      fused.step(1e-2 * step);
    }
    const train::NamedTensors a = reference.state(), b = fused.state();
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i)
      EXPECT_TRUE(same_bits(a[i].second, b[i].second)) << dtype << " " << a[i].first;
    for (const auto& [name, p] : ref_params)
      EXPECT_TRUE(same_bits(p, fused_params.at(name))) << dtype << " " << name;
  }
}

TEST(FusedAdamW, SumOfSquaresMatchesAnF64SumAndRepeats) {
  std::vector<Tensor> tensors = {random({100, 333}, 7, DType::F32), random({17}, 8, DType::BF16),
                                 random({40000}, 9, DType::F16)};
  double want = 0;
  for (const Tensor& t : tensors)
    for (double x : t.to_vector_f64()) want += x * x;
  const Tensor got = ops::sum_of_squares(tensors);  // ()
  EXPECT_EQ(got.dim(), 0);
  EXPECT_NEAR(got.item(), want, 1e-5 * want);  // F32 sums over chunks of 1,024 elements
  EXPECT_TRUE(same_bits(got, ops::sum_of_squares(tensors)));
  EXPECT_EQ(ops::sum_of_squares({}).item(), 0.0);
  // Through the trainer's helper: the same norm clip_grad_norm computes, to F32 rounding.
  std::map<std::string, Tensor> params = make_params(DType::F32);
  set_grads(params, 3);
  const double norm = train::gradient_norm(params);
  EXPECT_NEAR(norm, train::clip_grad_norm(params, 0.0), 1e-6 * norm);
  EXPECT_EQ(train::clip_scale(norm, 0.0), 1.0);
  EXPECT_EQ(train::clip_scale(norm, 2 * norm), 1.0);
  EXPECT_DOUBLE_EQ(train::clip_scale(norm, norm / 2), (norm / 2) / (norm + 1e-6));
}

TEST(BadInput, FusedOptimizerOps) {
  const Tensor p = Tensor::zeros({4, 3});
  const Tensor f = Tensor::zeros({4, 3});
  const Tensor wrong = Tensor::zeros({3, 4});
  EXPECT_NE(error_of([&] {
              ops::adamw_step({{p, f, f, wrong, f, true}}, {});
            })
                .find("tensor 0: exp_avg must be dense f32 of the shape and device of param "
                      "f32(4, 3)"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              ops::adamw_step({{p, Tensor(), f, f, f, true}}, {});
            }).find("tensor 0: grad must be dense like param"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              ops::adamw_step({{p, p.to(DType::BF16), f, f, f, true}}, {});
            }).find("found bf16(4, 3)"),
            std::string::npos);
  ops::AdamWScalars no_bias;
  no_bias.bias1 = 0;
  EXPECT_NE(error_of([&] {
              ops::adamw_step({{p, f, f, f, f, false}}, no_bias);
            }).find("bias corrections must be positive"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              ops::sum_of_squares({p, p.transpose(0, 1)});
            }).find("tensor 1 must be dense f32, bf16 or f16"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              ops::sum_of_squares({Tensor::zeros({2}, DType::F64)});
            }).find("found f64(2,)"),
            std::string::npos);
}

namespace {

fs::path temp_dir(const std::string& name) {
  const fs::path dir =
      fs::temp_directory_path() / ("microllm_test_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

model::ModelConfig tiny_config(int64_t vocab) {
  return model::ModelConfig::from_json({{"model_type", "qwen2"},
                                        {"vocab_size", vocab},
                                        {"hidden_size", 32},
                                        {"intermediate_size", 64},
                                        {"num_hidden_layers", 2},
                                        {"num_attention_heads", 4},
                                        {"num_key_value_heads", 2},
                                        {"rms_norm_eps", 1e-6},
                                        {"rope_theta", 10000.0},
                                        {"tie_word_embeddings", true}},
                                       "tiny");
}

train::TokenFile random_tokens(const fs::path& dir, int64_t vocab) {
  Generator gen(13);
  std::vector<uint32_t> tokens(3000);
  for (uint32_t& t : tokens) t = static_cast<uint32_t>(gen.next_u64() % vocab);
  train::write_token_file((dir / "data.bin").string(), tokens, vocab);
  return train::load_token_file((dir / "data.bin").string(), vocab);
}

}  // namespace

TEST(Trainer, FusedOptimizerTrainsLikeTheReferenceAndResumesBitForBit) {
  const fs::path dir = temp_dir("fused");
  const int64_t vocab = 24;
  const train::TokenFile data = random_tokens(dir, vocab);
  train::TrainOptions o;
  o.steps = 6;
  o.batch = 3;
  o.seq = 10;
  o.warmup = 2;
  o.seed = 2;
  o.lr = 1e-2;
  o.grad_clip = 0.5;  // small enough that every step clips
  o.optimizer_kernels = "reference";
  train::Trainer reference(tiny_config(vocab), o);
  o.optimizer_kernels = "fused";
  train::Trainer straight(tiny_config(vocab), o);
  while (straight.step() < o.steps) {
    const train::StepStats a = reference.train_step(data), b = straight.train_step(data);
    EXPECT_GT(a.grad_norm, o.grad_clip);
    EXPECT_NEAR(a.grad_norm, b.grad_norm, 1e-5 * a.grad_norm) << "step " << a.step;
    EXPECT_NEAR(a.loss, b.loss, 1e-5 * a.loss) << "step " << a.step;
  }
  for (const auto& [name, p] : reference.model().parameters()) {
    const std::vector<double> x = p.to_vector_f64(),
                              y = straight.model().parameters().at(name).to_vector_f64();
    for (size_t i = 0; i < x.size(); ++i) ASSERT_NEAR(x[i], y[i], 1e-5) << name << " " << i;
  }

  train::Trainer first(tiny_config(vocab), o);
  while (first.step() < o.steps / 2) first.train_step(data);
  first.save_checkpoint(dir.string());
  train::Trainer second(tiny_config(vocab), o);
  second.resume(dir.string());
  while (second.step() < o.steps) second.train_step(data);
  for (const auto& [name, p] : straight.model().parameters())
    ASSERT_TRUE(same_bits(p, second.model().parameters().at(name))) << name;
  fs::remove_all(dir);
}

TEST(BadInput, TrainerOptimizerKernels) {
  train::TrainOptions o;
  o.optimizer_kernels = "fast";
  EXPECT_NE(error_of([&] {
              train::Trainer t(tiny_config(8), o);
            }).find("optimizer kernels must be auto, fused or reference, found 'fast'"),
            std::string::npos);
  o.optimizer_kernels = "fused";
  o.optimizer = "sgd";
  EXPECT_NE(error_of([&] {
              train::Trainer t(tiny_config(8), o);
            }).find("fused optimizer kernels exist for AdamW without ZeRO-1, found optimizer sgd"),
            std::string::npos);
}
