// Finite-difference gradient checks (F64, tests/support/gradcheck.h) of rms_norm (also on a
// transposed input) and add_rms_norm with both outputs, only the normed one or only the
// sum feeding the loss.
#include <gtest/gtest.h>

#include "microllm/ops/ops.h"
#include "support/gradcheck.h"

using namespace microllm;
using microllm::testing::gradcheck;
using microllm::testing::random_leaf;

TEST(GradcheckLayers, RmsNorm) {
  // (B, T, C) with C = 5; eps large enough to matter.
  EXPECT_TRUE(
      gradcheck([](const std::vector<Tensor>& in) { return ops::rms_norm(in[0], in[1], 1e-2); },
                {random_leaf({2, 3, 5}, 2), random_leaf({5}, 3)}));
  EXPECT_TRUE(gradcheck(
      [](const std::vector<Tensor>& in) {
        return ops::rms_norm(in[0].transpose(0, 1), in[1], 1e-6);
      },
      {random_leaf({5, 2}, 4), random_leaf({5}, 5)}));
}

TEST(GradcheckLayers, AddRmsNormBothOutputs) {
  const Tensor x = random_leaf({2, 3, 4}, 6), residual = random_leaf({2, 3, 4}, 7);
  const Tensor weight = random_leaf({4}, 8);
  // Both outputs feed the loss: the sum gets the direct gradient plus the norm's.
  EXPECT_TRUE(gradcheck(
      [](const std::vector<Tensor>& in) {
        auto r = ops::add_rms_norm(in[0], in[1], in[2], 1e-5);
        return ops::concat({r.sum, r.normed}, 0);
      },
      {x, residual, weight}));
  // Only the normed output used.
  EXPECT_TRUE(gradcheck(
      [](const std::vector<Tensor>& in) {
        return ops::add_rms_norm(in[0], in[1], in[2], 1e-5).normed;
      },
      {x, residual, weight}));
  // Only the sum used (the weight gets no gradient, so it is not checked).
  Tensor frozen = weight.detach().clone();
  EXPECT_TRUE(gradcheck(
      [](const std::vector<Tensor>& in) {
        return ops::add_rms_norm(in[0], in[1], in[2], 1e-5).sum;
      },
      {x, residual, frozen}));
}
