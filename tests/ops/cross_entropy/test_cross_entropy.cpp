// CPU forward of cross_entropy against the mean negative log-softmax computed here in
// double (ignored rows, F32, huge logits), every row ignored giving 0 and a zero
// gradient, and the error paths: targets out of range, -100 when it is not the
// ignore_index, mismatched shapes, wrong rank, no classes, non-integer targets.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "microllm/ops/ops.h"
#include "ops/op_test_util.h"
#include "ops/softmax/softmax_reference.h"

using namespace microllm;
using microllm::testing::optest::f64;
using microllm::testing::optest::ids;
using microllm::testing::optest::randn_tensor;

using microllm::testing::optest::ref_softmax;
using microllm::testing::optest::ref_softmax_rows;

// ---- forward ---------------------------------------------------------------------------------

TEST(OpsForward, CrossEntropyIsMeanNegLogSoftmax) {
  const Tensor logits = randn_tensor({4, 6}, 12, DType::F64, 0.0, 3.0);
  const std::vector<int64_t> targets = {5, -100, 0, 3};
  const std::vector<double> l = logits.to_vector_f64();
  const std::vector<double> logp = ref_softmax_rows(l, 6, true);
  double want = 0.0;
  int kept = 0;
  for (int i = 0; i < 4; ++i) {
    if (targets[i] == -100) continue;
    want -= logp[i * 6 + targets[i]];
    ++kept;
  }
  want /= kept;
  EXPECT_NEAR(ops::cross_entropy(logits, ids(targets, {4})).item(), want, 1e-13);
  EXPECT_NEAR(ops::cross_entropy(logits.to(DType::F32), ids(targets, {4})).item(), want, 1e-5);
  // Huge logits stay finite: losses 1000 − 0 and 500 − (−1000).
  const Tensor big = f64({1000, 0, -1000, 500}, {2, 2});
  EXPECT_NEAR(ops::cross_entropy(big, ids({1, 0}, {2})).item(), 0.5 * (1000.0 + 1500.0), 1e-9);
}

TEST(OpsForward, CrossEntropyAllIgnoredIsZeroWithZeroGrad) {
  Tensor logits = randn_tensor({3, 4}, 13);
  logits.set_requires_grad(true);
  const Tensor loss = ops::cross_entropy(logits, ids({-100, -100, -100}, {3}));
  EXPECT_EQ(loss.item(), 0.0);
  EXPECT_TRUE(std::isfinite(loss.item()));
  loss.backward();
  ASSERT_TRUE(logits.grad().defined());
  EXPECT_EQ(logits.grad().to_vector_f64(), std::vector<double>(12, 0.0));
}

// ---- bad input -------------------------------------------------------------------------------

namespace {
// Zero tensors of a shape, for the error cases.
Tensor f32(const Shape& shape) { return Tensor::zeros(shape, DType::F32); }
Tensor i64(const Shape& shape) { return Tensor::zeros(shape, DType::I64); }
}  // namespace

TEST(BadInput, CrossEntropy) {
  const Tensor logits = f32({2, 4});
  EXPECT_ERROR(ops::cross_entropy(logits, ids({1, 4}, {2})), "cross_entropy",
               {"target 4", "row 1", "[0, 4)"});
  EXPECT_ERROR(ops::cross_entropy(logits, ids({-1, 0}, {2})), "cross_entropy",
               {"target -1", "row 0", "-100"});
  // -100 is only ignored when it is the ignore_index.
  EXPECT_ERROR(ops::cross_entropy(logits, ids({-100, 0}, {2}), 3), "cross_entropy",
               {"target -100"});
  EXPECT_ERROR(ops::cross_entropy(logits, ids({0, 1, 2}, {3})), "cross_entropy",
               {"f32(2, 4)", "i64(3,)"});
  EXPECT_ERROR(ops::cross_entropy(logits, i64({2, 1})), "cross_entropy", {"i64(2, 1)"});
  EXPECT_ERROR(ops::cross_entropy(f32({2, 3, 4}), i64({2})), "cross_entropy",
               {"rank 2", "f32(2, 3, 4)"});
  EXPECT_ERROR(ops::cross_entropy(f32({2, 0}), i64({2})), "cross_entropy",
               {"no classes", "f32(2, 0)"});
  EXPECT_ERROR(ops::cross_entropy(logits, f32({2})), "cross_entropy", {"'targets'", "f32(2,)"});
}
