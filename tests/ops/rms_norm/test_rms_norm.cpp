// CPU forward values of rms_norm and add_rms_norm against a reference written here in
// double (F64 and F32), add_rms_norm = add → rms_norm bit for bit (outputs and gradients),
// and their error paths: zero width, a weight of the wrong shape or
// dtype, a negative eps, a 0-d input, residuals that differ in shape or dtype.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "microllm/ops/ops.h"
#include "ops/op_test_util.h"
#include "ops/rms_norm/add_rms_norm_fusion.h"

using namespace microllm;
using microllm::testing::optest::all_close;
using microllm::testing::optest::randn_tensor;

// ---- forward ---------------------------------------------------------------------------------

TEST(OpsForward, RmsNormMatches) {
  const int64_t C = 6;
  const double eps = 1e-5;
  const Tensor x = randn_tensor({2, 2, C}, 4);
  const Tensor w = randn_tensor({C}, 5);
  const std::vector<double> xv = x.to_vector_f64(), wv = w.to_vector_f64();
  std::vector<double> want;
  for (size_t r = 0; r < xv.size() / C; ++r) {
    double ss = 0.0;
    for (int64_t i = 0; i < C; ++i) ss += xv[r * C + i] * xv[r * C + i];
    const double rstd = 1.0 / std::sqrt(ss / C + eps);
    for (int64_t i = 0; i < C; ++i) want.push_back(xv[r * C + i] * rstd * wv[i]);
  }
  EXPECT_TRUE(all_close(ops::rms_norm(x, w, eps), want, 1e-14));
  EXPECT_TRUE(all_close(ops::rms_norm(x.to(DType::F32), w.to(DType::F32), eps), want, 1e-5));
  // add_rms_norm of (x − r, r) gives the same normed values and sum = x.
  const Tensor residual = randn_tensor({2, 2, C}, 6);
  auto fused = ops::add_rms_norm(ops::sub(x, residual), residual, w, eps);
  EXPECT_TRUE(all_close(fused.sum, xv, 1e-14));
  EXPECT_TRUE(all_close(fused.normed, want, 1e-13));
}

TEST(OpsForward, AddRmsNormIsItsCompositionBitForBit) {
  for (DType dtype : {DType::F64, DType::F32, DType::BF16})
    for (const Shape& shape : {Shape{3, 5, 32}, Shape{4, 33}})
      EXPECT_TRUE(microllm::testing::add_rms_norm_is_its_composition(shape, dtype, Device::cpu()));
}

// ---- bad input -------------------------------------------------------------------------------

namespace {
// Zero tensors of a shape, for the error cases.
Tensor f32(const Shape& shape) { return Tensor::zeros(shape, DType::F32); }
Tensor f64(const Shape& shape) { return Tensor::zeros(shape, DType::F64); }
}  // namespace

TEST(BadInput, RmsNorm) {
  EXPECT_ERROR(ops::rms_norm(f32({2, 0}), f32({0}), 1e-6), "rms_norm", {"width 0", "f32(2, 0)"});
  EXPECT_ERROR(ops::rms_norm(f32({2, 4}), f32({3}), 1e-6), "rms_norm", {"f32(2, 4)", "f32(3,)"});
  EXPECT_ERROR(ops::rms_norm(f32({2, 4}), f32({1, 4}), 1e-6), "rms_norm", {"f32(1, 4)"});
  EXPECT_ERROR(ops::rms_norm(f32({2, 4}), f64({4}), 1e-6), "rms_norm", {"f32(2, 4)", "f64(4,)"});
  EXPECT_ERROR(ops::rms_norm(f32({2, 4}), f32({4}), -1.0), "rms_norm", {"eps", "-1"});
  EXPECT_ERROR(ops::rms_norm(Tensor::scalar(1.0), f32({1}), 1e-6), "rms_norm", {"f32()"});
  EXPECT_ERROR(ops::add_rms_norm(f32({2, 4}), f32({3, 4}), f32({4}), 1e-6), "add_rms_norm",
               {"f32(2, 4)", "f32(3, 4)", "differ in shape"});
  EXPECT_ERROR(ops::add_rms_norm(f32({2, 4}), f64({2, 4}), f32({4}), 1e-6), "add_rms_norm",
               {"residual", "f64(2, 4)"});
  EXPECT_ERROR(ops::add_rms_norm(f32({2, 0}), f32({2, 0}), f32({0}), 1e-6), "add_rms_norm",
               {"width 0"});
}
