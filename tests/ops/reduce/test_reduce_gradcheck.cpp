// Finite-difference gradient checks (F64, tests/support/gradcheck.h) of sum, mean and max
// along every dim with and without keepdim, sum_all and mean_all (also of a 0-d tensor),
// and reductions of non-contiguous inputs.
#include <gtest/gtest.h>

#include "microllm/ops/ops.h"
#include "support/gradcheck.h"

using namespace microllm;
using microllm::testing::gradcheck;
using microllm::testing::random_leaf;

TEST(GradcheckReduce, SumMeanMaxAlongEveryDim) {
  const Tensor x = random_leaf({2, 3, 4}, 8);
  for (int64_t dim : {0, 1, 2, -1})
    for (bool keepdim : {false, true}) {
      SCOPED_TRACE("dim " + std::to_string(dim) + (keepdim ? " keepdim" : ""));
      EXPECT_TRUE(gradcheck(
          [=](const std::vector<Tensor>& in) { return ops::sum(in[0], dim, keepdim); }, {x}));
      EXPECT_TRUE(gradcheck(
          [=](const std::vector<Tensor>& in) { return ops::mean(in[0], dim, keepdim); }, {x}));
      EXPECT_TRUE(gradcheck(
          [=](const std::vector<Tensor>& in) { return ops::max(in[0], dim, keepdim); }, {x}));
    }
}

TEST(GradcheckReduce, SumAllMeanAll) {
  const Tensor x = random_leaf({3, 4}, 9);
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& in) { return ops::sum_all(in[0]); }, {x}));
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& in) { return ops::mean_all(in[0]); }, {x}));
  // Through a non-contiguous view, and of a 0-d tensor.
  EXPECT_TRUE(gradcheck(
      [](const std::vector<Tensor>& in) { return ops::mean_all(in[0].transpose(0, 1)); }, {x}));
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& in) { return ops::sum_all(in[0]); },
                        {random_leaf({}, 10)}));
}

TEST(GradcheckReduce, ReductionsOfNonContiguousInput) {
  const Tensor x = random_leaf({4, 3}, 11);
  EXPECT_TRUE(gradcheck(
      [](const std::vector<Tensor>& in) { return ops::max(in[0].transpose(0, 1), 1, false); },
      {x}));
  EXPECT_TRUE(gradcheck(
      [](const std::vector<Tensor>& in) { return ops::sum(in[0].transpose(0, 1), 0, true); }, {x}));
}
