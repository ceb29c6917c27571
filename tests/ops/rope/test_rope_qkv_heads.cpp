// rope_qkv_heads on the CPU: forward values and the gradient of qkv bit for bit equal to the
// unfused form (split, rope on the transposed query and key views, the value view made dense)
// in F64, F32 and BF16, with (T) and (B, T) positions, I32 and I64, gradients for some
// outputs only; a finite-difference check in F64; and the error paths.
#include <gtest/gtest.h>

#include <vector>

#include "microllm/ops/ops.h"
#include "ops/op_test_util.h"
#include "support/gradcheck.h"

using namespace microllm;
using microllm::testing::gradcheck;
using microllm::testing::random_leaf;
using microllm::testing::optest::ids;
using microllm::testing::optest::randn_tensor;
using microllm::testing::optest::same_bits;

namespace {

// The unfused form the model used before: q, k, v as rope_qkv_heads returns them.
ops::QkvHeads unfused(const Tensor& qkv, int64_t H, int64_t Hkv, const Tensor& positions,
                      const Tensor& inv_freq) {
  const std::vector<Tensor> parts = ops::split(qkv, 2, {H, Hkv, Hkv});
  return {ops::rope(parts[0].transpose(1, 2), positions, inv_freq),
          ops::rope(parts[1].transpose(1, 2), positions, inv_freq),
          parts[2].transpose(1, 2).contiguous()};
}

struct Case {
  Shape qkv;  // (B, T, H + 2·Hkv, D)
  int64_t H, Hkv;
  Tensor positions;
};

// A loss that weights every element of the outputs it is given (use_q/k/v) differently, so
// each gradient element differs.
Tensor weighted_loss(const ops::QkvHeads& o, bool use_q, bool use_k, bool use_v, DType dtype) {
  Tensor loss;
  const Tensor* outs[3] = {&o.q, &o.k, &o.v};
  const bool use[3] = {use_q, use_k, use_v};
  for (int i = 0; i < 3; ++i) {
    if (!use[i]) continue;
    const Tensor w = randn_tensor(outs[i]->shape(), 50 + i, dtype);
    const Tensor term = ops::sum_all(ops::mul(*outs[i], w));
    loss = loss.defined() ? ops::add(loss, term) : term;
  }
  return loss;
}

// Forward and backward of both forms from the same leaf; every output and the gradient of
// qkv must carry the same bits.
void expect_same_as_unfused(const Case& c, DType dtype, double theta, bool use_q, bool use_k,
                            bool use_v) {
  const Tensor inv_freq = ops::rope_inv_freq(c.qkv[3], theta);
  Tensor fused_in = randn_tensor(c.qkv, 7, dtype);
  Tensor ref_in = fused_in.clone();
  fused_in.set_requires_grad(true);
  ref_in.set_requires_grad(true);
  const ops::QkvHeads got = ops::rope_qkv_heads(fused_in, c.H, c.Hkv, c.positions, inv_freq);
  const ops::QkvHeads want = unfused(ref_in, c.H, c.Hkv, c.positions, inv_freq);
  const std::string where = std::string(dtype_name(dtype)) + " qkv " + shape_str(c.qkv);
  EXPECT_EQ(got.q.shape(), (Shape{c.qkv[0], c.H, c.qkv[1], c.qkv[3]})) << where;
  EXPECT_TRUE(got.q.is_contiguous() && got.k.is_contiguous() && got.v.is_contiguous()) << where;
  EXPECT_TRUE(same_bits(got.q, want.q)) << where;
  EXPECT_TRUE(same_bits(got.k, want.k)) << where;
  EXPECT_TRUE(same_bits(got.v, want.v)) << where;
  weighted_loss(got, use_q, use_k, use_v, dtype).backward();
  weighted_loss(want, use_q, use_k, use_v, dtype).backward();
  EXPECT_TRUE(same_bits(fused_in.grad(), ref_in.grad()))
      << where << " gradients of q " << use_q << " k " << use_k << " v " << use_v;
}

}  // namespace

TEST(OpsRopeQkvHeads, SameBitsAsTheUnfusedForm) {
  const std::vector<Case> cases = {
      {{2, 5, 3 + 2 * 1, 8}, 3, 1, ids({0, 1, 2, 3, 4}, {5})},
      {{1, 3, 2 + 2 * 2, 6}, 2, 2, ids({7, 9, 11}, {3}, DType::I32)},
      {{2, 4, 4 + 2 * 2, 16}, 4, 2, ids({0, 5, 2, 9, 1, 4, 3, 30000}, {2, 4})},
      {{1, 1, 14 + 2 * 2, 64}, 14, 2, ids({4090}, {1})}};
  for (DType dtype : {DType::F64, DType::F32, DType::BF16})
    for (const Case& c : cases) expect_same_as_unfused(c, dtype, 1e4, true, true, true);
}

TEST(OpsRopeQkvHeads, OutputsWithoutGradientGiveZeros) {
  const Case c{{2, 3, 2 + 2 * 1, 8}, 2, 1, ids({3, 4, 5}, {3})};
  expect_same_as_unfused(c, DType::F32, 1e6, true, false, true);
  expect_same_as_unfused(c, DType::F32, 1e6, false, true, false);
  expect_same_as_unfused(c, DType::F64, 1e6, false, false, true);
}

TEST(GradcheckLayers, RopeQkvHeads) {
  const Tensor inv_freq = ops::rope_inv_freq(6, 100.0);
  const Tensor positions = ids({0, 5, 2, 9, 1, 4}, {2, 3}, DType::I32);  // (B, T)
  // Each output weighted on its own, so the check sees all three and how they mix.
  EXPECT_TRUE(gradcheck(
      [=](const std::vector<Tensor>& in) {
        const ops::QkvHeads o = ops::rope_qkv_heads(in[0], 2, 1, positions, inv_freq);
        return ops::add(ops::add(ops::sum_all(ops::mul(o.q, o.q)), ops::sum_all(o.k)),
                        ops::sum_all(ops::scale(o.v, 3.0)));
      },
      {random_leaf({2, 3, 4, 6}, 17)}));
}

TEST(OpsRopeQkvHeads, BadInputGetsOneClearError) {
  const Tensor inv_freq = ops::rope_inv_freq(4, 1e4);
  const Tensor qkv = randn_tensor({1, 3, 4, 4}, 1);  // H 2, Hkv 1
  const Tensor pos = ids({0, 1, 2}, {3});
  EXPECT_ERROR(ops::rope_qkv_heads(qkv, 2, 2, pos, inv_freq), "rope_qkv_heads",
               {"(B, T, 6, D)", "f64(1, 3, 4, 4)"});
  EXPECT_ERROR(ops::rope_qkv_heads(qkv, 0, 2, pos, inv_freq), "rope_qkv_heads",
               {"positive", "num_heads 0"});
  EXPECT_ERROR(ops::rope_qkv_heads(randn_tensor({3, 4, 4}, 1), 2, 1, pos, inv_freq),
               "rope_qkv_heads", {"rank 4"});
  EXPECT_ERROR(ops::rope_qkv_heads(randn_tensor({1, 3, 4, 3}, 1), 2, 1, pos, inv_freq),
               "rope_qkv_heads", {"even"});
  EXPECT_ERROR(ops::rope_qkv_heads(qkv, 2, 1, ids({0, 1}, {2}), inv_freq), "rope_qkv_heads",
               {"(T) or (B, T)", "(2,)"});
  EXPECT_ERROR(ops::rope_qkv_heads(qkv, 2, 1, pos, ops::rope_inv_freq(6, 1e4)), "rope_qkv_heads",
               {"inv_freq must be (2)"});
  EXPECT_ERROR(ops::rope_qkv_heads(qkv, 2, 1, randn_tensor({3}, 1), inv_freq), "rope_qkv_heads",
               {"'positions'"});
}
