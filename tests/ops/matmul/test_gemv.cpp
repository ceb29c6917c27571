// ops::gemv_out, the decode projection, on the CPU (the reference the CUDA kernel is held
// to): against matmul_naive (plain F64 loops) with and without bias, the SwiGLU epilogue
// against swiglu of the two F64 products, every row count 1..8, and the error paths.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/expect_error.h"
#include "microllm/ops/ops.h"
#include "ops/matmul/gemv_test_util.h"
#include "ops/op_test_util.h"

using namespace microllm;
using microllm::testing::throws_error;
using microllm::testing::gemv::abs_values;
using microllm::testing::gemv::worst_error;
using microllm::testing::optest::randn_tensor;

TEST(Gemv, MatchesTheNaiveProductWithAndWithoutBias) {
  for (DType dtype : {DType::F32, DType::F64})
    for (int64_t M = 1; M <= ops::kGemvMaxRows; ++M)
      for (bool with_bias : {false, true}) {
        const int64_t K = 37, N = 23;
        const Tensor x = randn_tensor({M, K}, 10 + static_cast<uint64_t>(M), dtype);
        const Tensor w = randn_tensor({N, K}, 20, dtype);
        const Tensor b = with_bias ? randn_tensor({N}, 30, dtype) : Tensor();
        Tensor y = Tensor::empty({M, N}, dtype);
        ops::gemv_out(x, w, b, y);
        Tensor want = ops::matmul_naive(x.to(DType::F64), w.to(DType::F64), false, true);
        if (with_bias) want = ops::add(want, b.to(DType::F64));
        const Tensor mag =
            ops::matmul_naive(abs_values(x, DType::F64), abs_values(w, DType::F64), false, true);
        const double rtol = dtype == DType::F64 ? 1e-13 : 2e-6;
        EXPECT_LT(worst_error(y, want, mag), rtol) << dtype << " M " << M << " bias " << with_bias;
      }
}

TEST(Gemv, SwigluEpilogueMatchesSwigluOfTheTwoHalves) {
  for (int64_t M : {1, 3, 8}) {
    const int64_t K = 40, F = 19;
    const Tensor x = randn_tensor({M, K}, 40 + static_cast<uint64_t>(M), DType::F64);
    const Tensor w = randn_tensor({2 * F, K}, 50, DType::F64);
    Tensor y = Tensor::empty({M, F}, DType::F64);
    ops::gemv_out(x, w, Tensor(), y, ops::GemvEpilogue::swiglu);
    const Tensor gate = ops::matmul_naive(x, w.narrow(0, 0, F).contiguous(), false, true);
    const Tensor up = ops::matmul_naive(x, w.narrow(0, F, F).contiguous(), false, true);
    const std::vector<double> got = y.to_vector_f64(), g = gate.to_vector_f64(),
                              u = up.to_vector_f64();
    for (size_t i = 0; i < got.size(); ++i) {
      const double want = g[i] / (1.0 + std::exp(-g[i])) * u[i];
      EXPECT_NEAR(got[i], want, 1e-12 * (1.0 + std::fabs(want))) << "M " << M << " element " << i;
    }
  }
}

TEST(Gemv, ARowGivesTheSameBitsAloneAndWithOthers) {
  const Tensor x = randn_tensor({8, 64}, 60, DType::F32);
  const Tensor w = randn_tensor({33, 64}, 61, DType::F32);
  Tensor all = Tensor::empty({8, 33}, DType::F32), one = Tensor::empty({1, 33}, DType::F32);
  ops::gemv_out(x, w, Tensor(), all);
  for (int64_t m = 0; m < 8; ++m) {
    ops::gemv_out(x.narrow(0, m, 1).contiguous(), w, Tensor(), one);
    EXPECT_EQ(one.to_vector_f32(), all.narrow(0, m, 1).contiguous().to_vector_f32()) << m;
  }
}

TEST(Gemv, RejectsWhatItDoesNotTake) {
  const Tensor x = randn_tensor({2, 16}, 1, DType::F32);
  const Tensor w = randn_tensor({6, 16}, 2, DType::F32);
  const Tensor y = Tensor::empty({2, 6}, DType::F32);
  EXPECT_TRUE(throws_error(
      [&] {
        ops::gemv_out(randn_tensor({9, 16}, 3, DType::F32), w, {},
                      Tensor::empty({9, 6}, DType::F32));
      },
      "gemv_out", {"takes 1 to 8 rows"}));
  EXPECT_TRUE(throws_error(
      [&] {
        ops::gemv_out(x, randn_tensor({6, 15}, 4, DType::F32), {}, y);
      },
      "gemv_out", {"expected x (M, in) and weight (out, in)"}));
  EXPECT_TRUE(throws_error(
      [&] {
        ops::gemv_out(x, w, {}, Tensor::empty({2, 5}, DType::F32));
      },
      "gemv_out", {"must have shape"}));
  EXPECT_TRUE(throws_error([&] { ops::gemv_out(x, w, randn_tensor({5}, 5, DType::F32), y); },
                           "gemv_out", {"bias must be (6)"}));
  EXPECT_TRUE(throws_error(
      [&] {
        ops::gemv_out(x, randn_tensor({7, 16}, 6, DType::F32), {},
                      Tensor::empty({2, 3}, DType::F32), ops::GemvEpilogue::swiglu);
      },
      "gemv_out", {"fused (2F, in) gate/up weight"}));
  EXPECT_TRUE(throws_error(
      [&] {
        ops::gemv_out(x, w, randn_tensor({3}, 7, DType::F32), Tensor::empty({2, 3}, DType::F32),
                      ops::GemvEpilogue::swiglu);
      },
      "gemv_out", {"takes no bias"}));
  EXPECT_TRUE(
      throws_error([&] { ops::gemv_out(x.to(DType::F64), w, {}, y); }, "gemv_out", {"dtype"}));
  EXPECT_FALSE(ops::gemv_supported(Device::cpu(), DType::BF16, 1, 16));
  EXPECT_FALSE(ops::gemv_supported(Device::cpu(), DType::F32, 9, 16));
  EXPECT_TRUE(ops::gemv_supported(Device::cpu(), DType::F32, 8, 16));
}
