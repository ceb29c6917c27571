// CPU forward of the reductions (sum, mean, max, argmax, sum_all, mean_all) against values
// worked here, keepdim shapes, an empty dimension, ties picking the first occurrence (also
// for max's gradient), and the error paths: dims out of range, empty dimensions for max,
// argmax and mean, integer input, undefined input, sum_to_shape to an unrelated shape.
#include <gtest/gtest.h>

#include <vector>

#include "microllm/ops/ops.h"
#include "ops/op_test_util.h"

using namespace microllm;
using microllm::testing::optest::all_close;
using microllm::testing::optest::f64;

// ---- forward ---------------------------------------------------------------------------------

TEST(OpsForward, ReductionValuesAndShapes) {
  const Tensor x = f64({1, 5, 2, -3, 0, 4}, {2, 3});
  EXPECT_TRUE(all_close(ops::sum(x, 1), {8, 1}, 0.0));
  EXPECT_TRUE(all_close(ops::sum(x, 0), {-2, 5, 6}, 0.0));
  EXPECT_TRUE(all_close(ops::mean(x, 1), {8.0 / 3, 1.0 / 3}, 1e-15));
  EXPECT_TRUE(all_close(ops::max(x, 0), {1, 5, 4}, 0.0));
  EXPECT_EQ(ops::argmax(x, 1).to_vector_i64(), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(ops::sum(x, 1).shape(), (Shape{2}));
  EXPECT_EQ(ops::sum(x, 1, true).shape(), (Shape{2, 1}));
  EXPECT_EQ(ops::max(x, -2, true).shape(), (Shape{1, 3}));
  EXPECT_EQ(ops::argmax(x, 0, true).dtype(), DType::I64);
  EXPECT_EQ(ops::sum_all(x).shape(), Shape{});
  EXPECT_EQ(ops::sum_all(x).item(), 9.0);
  EXPECT_DOUBLE_EQ(ops::mean_all(x).item(), 1.5);
  // Summing an empty dimension gives zeros.
  EXPECT_TRUE(all_close(ops::sum(Tensor::zeros({2, 0}, DType::F64), 1), {0, 0}, 0.0));
}

TEST(OpsForward, MaxArgmaxTiesPickFirstOccurrence) {
  const Tensor x = f64({1, 3, 3, 2, 7, 7, 7, 0}, {2, 4});
  EXPECT_EQ(ops::argmax(x, 1).to_vector_i64(), (std::vector<int64_t>{1, 0}));
  const Tensor col = f64({2, 9, 2, 9}, {4, 1});
  EXPECT_EQ(ops::argmax(col, 0).to_vector_i64(), (std::vector<int64_t>{1}));
  // The gradient of a tied max goes to the first position only.
  Tensor leaf = x.clone();
  leaf.set_requires_grad(true);
  ops::sum_all(ops::max(leaf, 1)).backward();
  EXPECT_EQ(leaf.grad().to_vector_f64(), (std::vector<double>{0, 1, 0, 0, 1, 0, 0, 0}));
}

// ---- bad input -------------------------------------------------------------------------------

namespace {
// Zero tensors of a shape, for the error cases.
Tensor f32(const Shape& shape) { return Tensor::zeros(shape, DType::F32); }
Tensor i64(const Shape& shape) { return Tensor::zeros(shape, DType::I64); }
}  // namespace

TEST(BadInput, Reductions) {
  EXPECT_ERROR(ops::sum(f32({2, 3}), 2), "sum", {"dimension 2", "rank 2"});
  EXPECT_ERROR(ops::max(f32({2, 3}), -3), "max", {"dimension -3", "rank 2"});
  EXPECT_ERROR(ops::max(f32({2, 0}), 1), "max", {"empty dimension 1", "f32(2, 0)"});
  EXPECT_ERROR(ops::argmax(f32({0, 4}), 0), "argmax", {"empty dimension 0", "f32(0, 4)"});
  EXPECT_ERROR(ops::mean(f32({2, 0}), 1), "mean", {"empty dimension 1", "f32(2, 0)"});
  EXPECT_ERROR(ops::mean_all(f32({0, 3})), "mean_all", {"empty", "f32(0, 3)"});
  EXPECT_ERROR(ops::sum(i64({2, 3}), 0), "sum", {"i64(2, 3)"});
  EXPECT_ERROR(ops::sum_all(Tensor()), "sum_all", {"undefined"});
  EXPECT_ERROR(ops::sum_to_shape(f32({2, 3}), {4}), "sum_to_shape", {"(2, 3)", "(4,)"});
}
