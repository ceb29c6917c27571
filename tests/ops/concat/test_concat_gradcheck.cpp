// Finite-difference gradient checks (F64, tests/support/gradcheck.h) of concat: several
// inputs along a middle dim, the last dim via -1, an input used twice, one without a
// gradient.
#include <gtest/gtest.h>

#include "microllm/ops/ops.h"
#include "support/gradcheck.h"

using namespace microllm;
using microllm::testing::gradcheck;
using microllm::testing::random_leaf;

TEST(GradcheckTensorOps, ConcatSeveralInputsMiddleDim) {
  EXPECT_TRUE(gradcheck(
      [](const std::vector<Tensor>& in) {
        return ops::concat({in[0], in[1], in[2]}, 1);
      },
      {random_leaf({2, 1, 3}, 44), random_leaf({2, 3, 3}, 45), random_leaf({2, 2, 3}, 46)}));
  // Last dim via -1, an input used twice, one input without a gradient.
  Tensor frozen = random_leaf({2, 2}, 47).set_requires_grad(false);
  EXPECT_TRUE(gradcheck(
      [](const std::vector<Tensor>& in) {
        return ops::concat({in[0], in[1], in[0]}, -1);
      },
      {random_leaf({2, 3}, 48), frozen}));
}
