// CUDA vs CPU for matmul and linear (cuBLASLt), forward and backward, F32 at SPEC §6
// tolerances (atol grows with √K) and BF16 by relative L2 error: shapes, transposes and
// batches, linear's bias epilogue and a non-contiguous input, TF32 off by default.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "cuda/cuda_test_utils.h"
#include "microllm/core/random.h"
#include "microllm/cuda/gemm.h"
#include "microllm/ops/ops.h"

using namespace microllm;
using microllm::testing::cuda_matches_cpu;
using microllm::testing::CudaCheckOptions;

namespace {

Tensor leaf(const Shape& shape, uint64_t seed, double mean = 0.0, double std = 1.0) {
  return microllm::testing::cuda_test_leaf(shape, seed, mean, std);
}

CudaCheckOptions in(DType dtype) { return microllm::testing::options_in(dtype); }

constexpr const DType (&kDtypes)[2] = microllm::testing::kCudaTestDtypes;

}  // namespace

TEST(CudaMatmul, ShapesTransposesAndBatches) {
  MICROLLM_REQUIRE_CUDA();
  struct Case {
    Shape a, b;
    bool ta, tb;
  };
  const std::vector<Case> cases = {
      {{1, 1}, {1, 1}, false, false},        {{3, 5}, {5, 7}, false, false},
      {{17, 33}, {65, 33}, false, true},     {{33, 17}, {33, 65}, true, false},
      {{33, 17}, {65, 33}, true, true},      {{4, 129, 64}, {4, 64, 31}, false, false},
      {{4, 64, 129}, {31, 64}, true, true},  {{130, 1}, {1, 258}, false, false},
      {{256, 384}, {384, 512}, false, false}};
  for (DType dtype : kDtypes)
    for (const Case& c : cases) {
      CudaCheckOptions o = in(dtype);
      // F32 GEMM sums K products: allow the rounding of a K-term sum.
      o.atol = 5e-5 * std::sqrt(static_cast<double>(c.ta ? c.a[c.a.size() - 2] : c.a.back()));
      EXPECT_TRUE(
          cuda_matches_cpu([&](const auto& x) { return ops::matmul(x[0], x[1], c.ta, c.tb); },
                           {leaf(c.a, 7), leaf(c.b, 8)}, o))
          << dtype << " a " << shape_str(c.a) << " b " << shape_str(c.b) << " ta " << c.ta << " tb "
          << c.tb;
    }
}

TEST(CudaMatmul, LinearWithBiasEpilogueAndNonContiguousInput) {
  MICROLLM_REQUIRE_CUDA();
  for (DType dtype : kDtypes) {
    CudaCheckOptions o = in(dtype);
    o.atol = 5e-4;
    const Tensor x = leaf({3, 37, 96}, 9), w = leaf({80, 96}, 10, 0.0, 0.1), b = leaf({80}, 11);
    EXPECT_TRUE(
        cuda_matches_cpu([](const auto& v) { return ops::linear(v[0], v[1], v[2]); }, {x, w, b}, o))
        << dtype;
    EXPECT_TRUE(cuda_matches_cpu([](const auto& v) { return ops::linear(v[0], v[1]); }, {x, w}, o))
        << dtype;
    // x read through a transposed view: (37, 3, 96) → (3, 37, 96).
    const Tensor xt = leaf({37, 3, 96}, 12);
    EXPECT_TRUE(cuda_matches_cpu(
        [](const auto& v) { return ops::linear(v[0].transpose(0, 1), v[1], v[2]); }, {xt, w, b}, o))
        << dtype;
  }
}

TEST(CudaMatmul, Tf32IsOffByDefaultAndCanBeAllowed) {
  MICROLLM_REQUIRE_CUDA();
  EXPECT_FALSE(cuda::allow_tf32());
  const Tensor a = leaf({512, 512}, 13), b = leaf({512, 512}, 14);
  const Tensor ref = ops::matmul(a.detach(), b.detach());
  const Tensor exact = ops::matmul(a.detach().to(Device::cuda(0)), b.detach().to(Device::cuda(0)));
  cuda::set_allow_tf32(true);
  const Tensor fast = ops::matmul(a.detach().to(Device::cuda(0)), b.detach().to(Device::cuda(0)));
  cuda::set_allow_tf32(false);
  const double exact_err = microllm::testing::relative_l2(exact, ref);
  const double tf32_err = microllm::testing::relative_l2(fast, ref);
  EXPECT_LT(exact_err, 1e-6);
  EXPECT_LT(tf32_err, 1e-3);  // SPEC §6 TF32 bound
  EXPECT_GT(cuda::gemm_algorithm_cache_size(), 0);
}
