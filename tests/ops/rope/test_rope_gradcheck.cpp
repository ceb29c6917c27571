// Finite-difference gradient checks (F64, tests/support/gradcheck.h) of rope with (T) and
// (B, T) positions, also on a transposed (non-contiguous) input.
#include <gtest/gtest.h>

#include "microllm/ops/ops.h"
#include "ops/op_test_util.h"
#include "support/gradcheck.h"

using namespace microllm;
using microllm::testing::gradcheck;
using microllm::testing::random_leaf;
using microllm::testing::optest::ids;

TEST(GradcheckLayers, RopePositionsT) {
  const Tensor inv_freq = ops::rope_inv_freq(4, 10000.0);
  const Tensor positions = ids({3, 7, 11}, {3});  // (T) non-zero positions
  EXPECT_TRUE(gradcheck(
      [=](const std::vector<Tensor>& in) { return ops::rope(in[0], positions, inv_freq); },
      {random_leaf({2, 2, 3, 4}, 14)}));
}

TEST(GradcheckLayers, RopePositionsBT) {
  const Tensor inv_freq = ops::rope_inv_freq(6, 100.0);
  const Tensor positions = ids({0, 5, 2, 9, 1, 4}, {2, 3}, DType::I32);  // (B, T)
  EXPECT_TRUE(gradcheck(
      [=](const std::vector<Tensor>& in) { return ops::rope(in[0], positions, inv_freq); },
      {random_leaf({2, 1, 3, 6}, 15)}));
  // x (B, T, H, D) transposed to (B, H, T, D): a non-contiguous input.
  EXPECT_TRUE(gradcheck(
      [=](const std::vector<Tensor>& in) {
        return ops::rope(in[0].transpose(1, 2), positions, inv_freq);
      },
      {random_leaf({2, 3, 2, 6}, 16)}));
}
