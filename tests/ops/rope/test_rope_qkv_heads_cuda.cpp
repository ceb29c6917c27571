// CUDA rope_qkv_heads: against the CPU (forward and the gradient of qkv; F32 at SPEC §6
// tolerances, BF16 and F16 by relative L2 error), bit for bit against the unfused CUDA form
// (split, rope on transposed views, the values made dense) forward and backward, on the
// training shape (14 + 2 + 2 heads of 64), D 128, runs of one pair (D/2 odd), (B, T) I32
// positions up to 32k and outputs without gradient; and the model's loss and gradients with
// the switch on and off.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "cuda/cuda_test_utils.h"
#include "microllm/core/random.h"
#include "microllm/ops/ops.h"
#include "model/model_gradients.h"
#include "model/tiny_config.h"
#include "ops/op_test_util.h"
#include "support/scoped_env.h"

using namespace microllm;
using microllm::testing::bit_equal;
using microllm::testing::cuda_matches_cpu;

namespace {

struct Case {
  Shape qkv;  // (B, T, H + 2·Hkv, D)
  int64_t H, Hkv;
  Tensor positions;
};

Tensor iota_positions(int64_t start, int64_t T) {
  std::vector<int64_t> values(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) values[static_cast<size_t>(t)] = start + t;
  return Tensor::from_vector(values, {T});
}

std::vector<Case> cases() {
  Generator gen(3);
  // (B, T) I32 positions scattered up to 32k, where a fast sin/cos would drift.
  const Tensor scattered = randint({2, 9}, 0, 32768, gen, DType::I32);
  return {{{2, 37, 14 + 2 * 2, 64}, 14, 2, iota_positions(0, 37)},
          {{1, 19, 16 + 2 * 8, 128}, 16, 8, iota_positions(513, 19)},
          {{2, 9, 3 + 2 * 1, 6}, 3, 1, scattered},
          {{2, 9, 4 + 2 * 2, 64}, 4, 2, scattered}};
}

// q, k and v flattened into one output, so one check covers all three and their gradients.
Tensor joined_outputs(const ops::QkvHeads& o) {
  return ops::concat({o.q.reshape({-1}), o.k.reshape({-1}), o.v.reshape({-1})}, 0);
}

}  // namespace

TEST(CudaRopeQkvHeads, MatchesCpu) {
  MICROLLM_REQUIRE_CUDA();
  for (DType dtype : microllm::testing::kCudaFloatDtypes)
    for (const Case& c : cases()) {
      const Tensor inv_freq = ops::rope_inv_freq(c.qkv[3], 1e6);
      const Tensor positions = c.positions;
      const int64_t H = c.H, Hkv = c.Hkv;
      EXPECT_TRUE(cuda_matches_cpu(
          [&](const auto& v) {
            return joined_outputs(ops::rope_qkv_heads(v[0], H, Hkv, v[1], inv_freq));
          },
          {microllm::testing::cuda_test_leaf(c.qkv, 21), positions},
          microllm::testing::options_in(dtype)))
          << dtype << " qkv " << shape_str(c.qkv);
    }
}

TEST(CudaRopeQkvHeads, SameBitsAsTheUnfusedForm) {
  MICROLLM_REQUIRE_CUDA();
  for (DType dtype : microllm::testing::kCudaFloatDtypes)
    for (const Case& c : cases())
      for (int used = 1; used < 8; ++used) {  // which of q, k, v receive a gradient
        const Device gpu = Device::cuda(0);
        const Tensor inv_freq = ops::rope_inv_freq(c.qkv[3], 1e4);
        const Tensor positions = c.positions.to(gpu);
        Generator gen(5);
        const Tensor base = randn(c.qkv, gen, dtype, gpu, 0.0, 1.0);
        Tensor fused_in = base.clone(), ref_in = base.clone();
        fused_in.set_requires_grad(true);
        ref_in.set_requires_grad(true);
        const ops::QkvHeads got = ops::rope_qkv_heads(fused_in, c.H, c.Hkv, positions, inv_freq);
        const std::vector<Tensor> parts = ops::split(ref_in, 2, {c.H, c.Hkv, c.Hkv});
        const ops::QkvHeads want{ops::rope(parts[0].transpose(1, 2), positions, inv_freq),
                                 ops::rope(parts[1].transpose(1, 2), positions, inv_freq),
                                 parts[2].transpose(1, 2).contiguous()};
        const std::string where = std::string(dtype_name(dtype)) + " qkv " + shape_str(c.qkv) +
                                  " gradients " + std::to_string(used);
        EXPECT_TRUE(bit_equal(got.q, want.q)) << where;
        EXPECT_TRUE(bit_equal(got.k, want.k)) << where;
        EXPECT_TRUE(bit_equal(got.v, want.v)) << where;
        auto loss = [&](const ops::QkvHeads& o) {
          const Tensor* outs[3] = {&o.q, &o.k, &o.v};
          Tensor sum;
          for (int i = 0; i < 3; ++i) {
            if ((used >> i & 1) == 0) continue;
            Generator wgen(60 + i);
            const Tensor w = randn(outs[i]->shape(), wgen, dtype, gpu, 0.0, 1.0);
            const Tensor term = ops::sum_all(ops::mul(*outs[i], w).to(DType::F32));
            sum = sum.defined() ? ops::add(sum, term) : term;
          }
          return sum;
        };
        loss(got).backward();
        loss(want).backward();
        EXPECT_TRUE(bit_equal(fused_in.grad(), ref_in.grad())) << where;
      }
}

TEST(CudaRopeQkvHeads, ModelLossAndGradientsWithTheSwitchEqualWithout) {
  MICROLLM_REQUIRE_CUDA();
  for (model::Family family : {model::Family::Qwen2, model::Family::Llama})
    for (DType dtype : {DType::F32, DType::BF16}) {
      auto run = [&](const char* fused) {
        const microllm::testing::ScopedEnv env("MICROLLM_FUSED_QKV_HEADS", fused);
        return microllm::testing::loss_and_gradients(microllm::testing::tiny_config(family),
                                                     Device::cuda(0), dtype);
      };
      const auto [loss_plain, grads_plain] = run("0");
      const auto [loss_fused, grads_fused] = run("1");
      const std::string where =
          std::string(dtype_name(dtype)) + " family " + std::to_string(static_cast<int>(family));
      EXPECT_TRUE(bit_equal(loss_fused, loss_plain)) << where;
      for (const auto& [name, g] : grads_plain) {
        ASSERT_TRUE(g.defined()) << where << " " << name;
        EXPECT_TRUE(bit_equal(grads_fused.at(name), g)) << where << " " << name;
      }
    }
}
