// Finite-difference gradient checks (F64, tests/support/gradcheck.h) of concat: several
// inputs along a middle dim, the last dim via -1, an input used twice, one without a
// gradient; of join over neighbours in one storage (its view path) and of split (a part
// unused, an empty part).
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

TEST(GradcheckTensorOps, JoinOfNeighboursAndSplit) {
  const Tensor base = random_leaf({5, 3}, 50).set_requires_grad(false);
  Tensor a = base.narrow(0, 0, 2).detach(), b = base.narrow(0, 2, 3).detach();
  a.set_requires_grad(true);
  b.set_requires_grad(true);
  EXPECT_TRUE(gradcheck(
      [](const std::vector<Tensor>& in) {
        const Tensor joined = ops::join({in[0], in[1]}, 0);  // (5, 3) a view
        return ops::mul(joined, joined);
      },
      {a, b}));
  EXPECT_TRUE(gradcheck(
      [](const std::vector<Tensor>& in) {
        const std::vector<Tensor> parts = ops::split(in[0], 1, {1, 0, 2, 1});
        return ops::concat({ops::mul(parts[2], parts[0]), parts[3]}, 1);  // part 1 (empty) unused
      },
      {random_leaf({2, 4, 2}, 51)}));
}
