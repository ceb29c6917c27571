// CPU forward values of softmax / log_softmax against a reference written here in double
// (rows that sum to one, a non-last dim, huge inputs that only max subtraction keeps
// finite, −inf mask entries), and their error paths (0-d input, a dim out of range, an
// integer input), each error naming the op and the offending shape or dtype.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "microllm/ops/ops.h"
#include "ops/op_test_util.h"
#include "ops/softmax/softmax_reference.h"

using namespace microllm;
using microllm::testing::optest::all_close;
using microllm::testing::optest::f64;
using microllm::testing::optest::randn_tensor;

using microllm::testing::optest::ref_softmax;
using microllm::testing::optest::ref_softmax_rows;

// ---- forward ---------------------------------------------------------------------------------

TEST(OpsForward, SoftmaxRowsSumToOneAndMatch) {
  const Tensor x = randn_tensor({3, 5}, 1);
  const std::vector<double> xv = x.to_vector_f64();
  const Tensor y = ops::softmax(x, -1);
  EXPECT_TRUE(all_close(y, ref_softmax_rows(xv, 5, false), 1e-15));
  const std::vector<double> yv = y.to_vector_f64();
  for (int r = 0; r < 3; ++r) {
    double total = 0.0;
    for (int i = 0; i < 5; ++i) total += yv[r * 5 + i];
    EXPECT_NEAR(total, 1.0, 1e-14);
  }
  // F32 input, F32 output, same values.
  const Tensor y32 = ops::softmax(x.to(DType::F32), -1);
  EXPECT_EQ(y32.dtype(), DType::F32);
  EXPECT_TRUE(all_close(y32, ref_softmax_rows(xv, 5, false), 1e-6));
}

TEST(OpsForward, SoftmaxAlongNonLastDim) {
  const Tensor x = randn_tensor({4, 3}, 2);  // softmax over dim 0 = rows of xᵀ
  const std::vector<double> xt = x.transpose(0, 1).to_vector_f64();
  const std::vector<double> want_t = ref_softmax_rows(xt, 4, false);
  const std::vector<double> got_t = ops::softmax(x, 0).transpose(0, 1).to_vector_f64();
  EXPECT_TRUE(all_close(got_t, want_t, 1e-15));
  EXPECT_TRUE(all_close(ops::log_softmax(x, 0).transpose(0, 1).to_vector_f64(),
                        ref_softmax_rows(xt, 4, true), 1e-14));
}

TEST(OpsForward, LogSoftmaxMatches) {
  const Tensor x = randn_tensor({2, 3, 4}, 3);
  EXPECT_TRUE(
      all_close(ops::log_softmax(x, -1), ref_softmax_rows(x.to_vector_f64(), 4, true), 1e-14));
}

TEST(OpsForward, StableSoftmaxOnHugeInputs) {
  for (DType dtype : {DType::F32, DType::F64}) {
    SCOPED_TRACE(std::string(dtype_name(dtype)));
    // exp(1000) overflows: only max subtraction keeps these finite.
    const Tensor x = Tensor::from_vector(std::vector<double>{1000, 1001, 999, -1000, -1001, -999},
                                         {2, 3}, dtype);
    const std::vector<double> y = ops::softmax(x, -1).to_vector_f64();
    const std::vector<double> ly = ops::log_softmax(x, -1).to_vector_f64();
    for (double v : y) EXPECT_TRUE(std::isfinite(v));
    for (double v : ly) EXPECT_TRUE(std::isfinite(v));
    std::vector<double> want = ref_softmax({0, 1, -1});
    const std::vector<double> second = ref_softmax({1, 0, 2});
    want.insert(want.end(), second.begin(), second.end());
    EXPECT_TRUE(all_close(y, want, 1e-6));
    std::vector<double> log_want;
    for (double p : want) log_want.push_back(std::log(p));
    EXPECT_TRUE(all_close(ly, log_want, 1e-5));
  }
}

TEST(OpsForward, SoftmaxWithMaskedEntries) {
  // −inf entries (a mask) get probability 0 and the rest renormalize.
  const double inf = std::numeric_limits<double>::infinity();
  const Tensor x = f64({-inf, 0.0, 1.0, 2.0, -inf, -inf}, {2, 3});
  const std::vector<double> first = ref_softmax({0.0, 1.0});
  EXPECT_TRUE(all_close(ops::softmax(x, -1), {0.0, first[0], first[1], 1.0, 0.0, 0.0}, 1e-15));
  const std::vector<double> log_y = ops::log_softmax(x, -1).to_vector_f64();
  EXPECT_EQ(log_y[0], -inf);
  EXPECT_NEAR(log_y[2], std::log(first[1]), 1e-15);
  EXPECT_EQ(log_y[3], 0.0);
}

// ---- bad input -------------------------------------------------------------------------------

namespace {
// Zero tensors of a shape, for the error cases.
Tensor f32(const Shape& shape) { return Tensor::zeros(shape, DType::F32); }
Tensor i64(const Shape& shape) { return Tensor::zeros(shape, DType::I64); }
}  // namespace

TEST(BadInput, Softmax) {
  EXPECT_ERROR(ops::softmax(Tensor::scalar(1.0)), "softmax", {"at least one dimension", "f32()"});
  EXPECT_ERROR(ops::log_softmax(f32({2, 3}), 2), "log_softmax", {"dimension 2", "rank 2"});
  EXPECT_ERROR(ops::softmax(i64({2, 3})), "softmax", {"i64(2, 3)"});
}
