// Gradients of cast: a finite-difference check (F64, tests/support/gradcheck.h) of the F64
// identity, and the backward returning the source dtype (F64 → F32, F32 → BF16; no graph
// to an integer dtype).
#include <gtest/gtest.h>

#include "microllm/ops/ops.h"
#include "ops/op_test_util.h"
#include "support/gradcheck.h"

using namespace microllm;
using microllm::testing::gradcheck;
using microllm::testing::random_leaf;

TEST(GradcheckTensorOps, CastIdentityF64) {
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& in) { return ops::cast(in[0], DType::F64); },
                        {random_leaf({2, 3}, 42)}));
}

TEST(GradcheckTensorOps, CastBackwardReturnsSourceDtype) {
  // F64 → F32: the gradient arrives in F32 and is cast back to F64.
  Tensor x = random_leaf({2, 3}, 43);
  Tensor y = ops::cast(x, DType::F32);
  ASSERT_EQ(y.dtype(), DType::F32);
  ops::sum_all(ops::scale(y, 2.0)).backward();
  ASSERT_TRUE(x.grad().defined());
  EXPECT_EQ(x.grad().dtype(), DType::F64);
  EXPECT_TRUE(microllm::testing::optest::all_close(x.grad(), std::vector<double>(6, 2.0), 0.0));
  // F32 → BF16: the F32 leaf receives an F32 gradient.
  Tensor w = Tensor::ones({4}, DType::F32).set_requires_grad(true);
  ops::sum_all(ops::cast(w, DType::BF16)).backward();
  ASSERT_TRUE(w.grad().defined());
  EXPECT_EQ(w.grad().dtype(), DType::F32);
  EXPECT_TRUE(microllm::testing::optest::all_close(w.grad(), std::vector<double>(4, 1.0), 0.0));
  // To an integer dtype: no graph.
  EXPECT_FALSE(ops::cast(x, DType::I64).requires_grad());
}
