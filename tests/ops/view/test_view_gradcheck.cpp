// Finite-difference gradient checks (F64, tests/support/gradcheck.h) of the tensor views
// beyond tests/autograd/test_smoke.cpp: permute, squeeze, unsqueeze, reshape, view,
// flatten, narrow, expand, slice, and reshape of a non-contiguous view (a copy).
#include <gtest/gtest.h>

#include "microllm/ops/ops.h"
#include "support/gradcheck.h"

using namespace microllm;
using microllm::testing::gradcheck;
using microllm::testing::random_leaf;

TEST(GradcheckViews, PermuteSqueezeUnsqueeze) {
  EXPECT_TRUE(gradcheck(
      [](const std::vector<Tensor>& in) {
        return ops::mul(in[0].permute({2, 0, 1}), in[1].unsqueeze(0).unsqueeze(-1));
      },
      {random_leaf({2, 3, 4}, 52), random_leaf({2}, 53)}));
  EXPECT_TRUE(gradcheck(
      [](const std::vector<Tensor>& in) { return ops::exp(in[0].squeeze(1).squeeze(-1)); },
      {random_leaf({3, 1, 2, 1}, 54)}));
}

TEST(GradcheckViews, ReshapeViewFlattenNarrowExpand) {
  EXPECT_TRUE(gradcheck(
      [](const std::vector<Tensor>& in) {
        return ops::mul(in[0].view({3, 4}).flatten(), in[0].reshape({12}));  // x used twice
      },
      {random_leaf({2, 6}, 55)}));
  EXPECT_TRUE(gradcheck(
      [](const std::vector<Tensor>& in) {
        return in[0].narrow(1, 1, 2).expand({3, 2, 2, 4}).contiguous();  // a new leading dim
      },
      {random_leaf({2, 4, 4}, 56)}));
  EXPECT_TRUE(gradcheck(
      [](const std::vector<Tensor>& in) {
        return in[0].expand({2, 3, 4}).slice(2, 1, 3).clone();
      },
      {random_leaf({2, 1, 4}, 57)}));
  EXPECT_TRUE(gradcheck(
      [](const std::vector<Tensor>& in) {
        return in[0].transpose(0, 2).reshape({-1, 2});  // reshape of a non-contiguous view copies
      },
      {random_leaf({2, 3, 2}, 58)}));
}
