// Finite-difference gradient checks (F64, tests/support/gradcheck.h) of cross_entropy with
// ignored rows, an ignore_index inside [0, V) with I32 targets, and transposed logits.
#include <gtest/gtest.h>

#include "microllm/ops/ops.h"
#include "ops/op_test_util.h"
#include "support/gradcheck.h"

using namespace microllm;
using microllm::testing::gradcheck;
using microllm::testing::random_leaf;
using microllm::testing::optest::ids;

TEST(GradcheckLayers, CrossEntropyWithIgnoredRows) {
  const Tensor targets = ids({2, -100, 0, 4, -100}, {5});
  EXPECT_TRUE(
      gradcheck([=](const std::vector<Tensor>& in) { return ops::cross_entropy(in[0], targets); },
                {random_leaf({5, 5}, 18)}));
  // An ignore_index inside [0, V) and i32 targets.
  const Tensor targets32 = ids({1, 3, 1, 0}, {4}, DType::I32);
  EXPECT_TRUE(gradcheck(
      [=](const std::vector<Tensor>& in) { return ops::cross_entropy(in[0], targets32, 1); },
      {random_leaf({4, 5}, 19)}));
  // Non-contiguous logits: (V, N) transposed.
  EXPECT_TRUE(gradcheck(
      [=](const std::vector<Tensor>& in) {
        return ops::cross_entropy(in[0].transpose(0, 1), targets);
      },
      {random_leaf({5, 5}, 20)}));
}
