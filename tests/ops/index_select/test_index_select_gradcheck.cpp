// Finite-difference gradient checks (F64, tests/support/gradcheck.h) of index_select with
// repeated indices along dims 0, 1 and -1, I64 and I32 indices.
#include <gtest/gtest.h>

#include "microllm/ops/ops.h"
#include "ops/op_test_util.h"
#include "support/gradcheck.h"

using namespace microllm;
using microllm::testing::gradcheck;
using microllm::testing::random_leaf;
using microllm::testing::optest::ids;

TEST(GradcheckTensorOps, IndexSelectRepeatedIndices) {
  const Tensor index = ids({2, 0, 2, 3, 2}, {5});
  EXPECT_TRUE(
      gradcheck([=](const std::vector<Tensor>& in) { return ops::index_select(in[0], 0, index); },
                {random_leaf({4, 3}, 49)}));
  const Tensor index32 = ids({1, 1, 0}, {3}, DType::I32);
  EXPECT_TRUE(
      gradcheck([=](const std::vector<Tensor>& in) { return ops::index_select(in[0], 1, index32); },
                {random_leaf({2, 3, 2}, 50)}));
  EXPECT_TRUE(gradcheck(
      [=](const std::vector<Tensor>& in) { return ops::index_select(in[0], -1, index32); },
      {random_leaf({2, 2, 3}, 51)}));
}
