// Activation recomputation: autograd::checkpoint gives a segment's gradients (inputs and the
// parameters it reads) bit for bit, saves nothing inside the segment, and leaves a no-grad
// forward as it is; Transformer::set_recompute gives the loss and every parameter gradient
// of the recorded model bit for bit for each family (F32 and F64), and the observer sees each
// value once.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "microllm/autograd/checkpoint.h"
#include "microllm/autograd/node.h"
#include "microllm/core/random.h"
#include "microllm/model/transformer.h"
#include "microllm/ops/ops.h"
#include "model/tiny_config.h"

using namespace microllm;
using microllm::testing::tiny_config;

namespace {

bool bit_equal(const Tensor& a, const Tensor& b) {
  if (!a.defined() || !b.defined()) return a.defined() == b.defined();
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
  const Tensor x = a.contiguous(), y = b.contiguous();
  return std::equal(static_cast<const char*>(x.raw_data()),
                    static_cast<const char*>(x.raw_data()) + x.nbytes(),
                    static_cast<const char*>(y.raw_data()));
}

Tensor random(const Shape& shape, uint64_t seed) {
  Generator gen(seed);
  return randn(shape, gen, DType::F32, Device::cpu(), 0.0, 1.0);
}

}  // namespace

TEST(Checkpoint, SegmentGradientsEqualTheRecordedSegment) {
  Tensor w = random({6, 5}, 1).set_requires_grad(true);  // a parameter the segment reads
  const Tensor x0 = random({3, 5}, 2);
  // y = tanh-free mix: linear, mul by itself, sum with the input again (x used twice).
  const autograd::Segment segment = [&w](const std::vector<Tensor>& in) {
    const Tensor y = ops::linear(in[0], w);                              // (3, 6)
    return std::vector<Tensor>{ops::mul(y, y), ops::add(in[0], in[0])};  // (3, 6), (3, 5)
  };
  const Tensor g0 = random({3, 6}, 3), g1 = random({3, 5}, 4);
  auto run = [&](bool checkpointed) {
    w.zero_grad();
    Tensor x = x0.clone().set_requires_grad(true);
    const Tensor through = ops::mul(x, x);  // a non-leaf input of the segment
    const std::vector<Tensor> out =
        checkpointed ? autograd::checkpoint("segment", segment, {through}) : segment({through});
    autograd::run_backward(out, {g0, g1});
    return std::pair{x.grad(), w.grad()};
  };
  const auto [x_plain, w_plain] = run(false);
  const auto [x_ckpt, w_ckpt] = run(true);
  ASSERT_TRUE(x_plain.defined() && w_plain.defined());
  EXPECT_TRUE(bit_equal(x_ckpt, x_plain));
  EXPECT_TRUE(bit_equal(w_ckpt, w_plain));
  // Without gradients the segment just runs.
  autograd::NoGradGuard no_grad;
  const std::vector<Tensor> out = autograd::checkpoint("segment", segment, {x0});
  EXPECT_FALSE(out[0].requires_grad());
  EXPECT_TRUE(bit_equal(out[1], ops::add(x0, x0)));
}

TEST(Checkpoint, KeepsNothingOfTheSegmentForBackward) {
  const Tensor x = random({4, 4}, 5).set_requires_grad(true);
  int calls = 0;
  const autograd::Segment segment = [&calls](const std::vector<Tensor>& in) {
    ++calls;
    return std::vector<Tensor>{ops::mul(ops::mul(in[0], in[0]), in[0])};
  };
  const std::vector<Tensor> out = autograd::checkpoint("segment", segment, {x});
  EXPECT_EQ(calls, 1);
  ASSERT_TRUE(out[0].grad_fn() != nullptr);
  EXPECT_EQ(out[0].grad_fn()->name(), "segment");  // one node, not the segment's two muls
  EXPECT_EQ(out[0].grad_fn()->next_edges().size(), 1u);
  out[0].backward(Tensor::full({4, 4}, 1.0));
  EXPECT_EQ(calls, 2);  // recomputed once in backward
  // d(x³)/dx = 3x²
  const std::vector<double> g = x.grad().to_vector_f64(), v = x.to_vector_f64();
  for (size_t i = 0; i < g.size(); ++i)
    EXPECT_NEAR(g[i], 3 * v[i] * v[i], 1e-5 * (1 + v[i] * v[i]));
}

TEST(Recompute, TransformerGradientsEqualTheRecordedModelBitForBit) {
  const model::Family families[] = {model::Family::Qwen2, model::Family::Llama,
                                    model::Family::Qwen3};
  for (model::Family family : families)
    for (DType dtype : {DType::F32, DType::F64}) {
      const model::ModelConfig c = tiny_config(family);
      const Tensor ids =
          Tensor::from_vector(std::vector<int64_t>{1, 5, 9, 2, 36, 0, 7, 7, 3, 11, 30, 4}, {2, 6});
      auto run = [&](bool recompute) {
        model::Transformer t(c, Device::cpu(), dtype, 17);
        t.set_requires_grad(true);
        t.set_recompute(recompute);
        std::map<std::string, int> seen;
        const Tensor logits =
            t.forward(ids, Tensor(), [&](const std::string& name, const Tensor&) { ++seen[name]; });
        const Tensor loss = model::Transformer::next_token_loss(logits, ids);
        loss.backward();
        for (const auto& [name, count] : seen) EXPECT_EQ(count, 1) << name;
        std::map<std::string, Tensor> grads;
        for (const auto& [name, p] : t.parameters()) grads[name] = p.grad();
        return std::pair{loss, grads};
      };
      const auto [loss_plain, grads_plain] = run(false);
      const auto [loss_re, grads_re] = run(true);
      const std::string where =
          std::string(dtype_name(dtype)) + " family " + std::to_string(static_cast<int>(family));
      EXPECT_TRUE(bit_equal(loss_re, loss_plain)) << where;
      ASSERT_EQ(grads_re.size(), grads_plain.size());
      for (const auto& [name, g] : grads_plain) {
        ASSERT_TRUE(g.defined()) << where << " " << name;
        EXPECT_TRUE(bit_equal(grads_re.at(name), g)) << where << " " << name;
      }
    }
}
