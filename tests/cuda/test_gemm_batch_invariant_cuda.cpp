// GemmMode::batch_invariant on CUDA (cuBLASLt): row r of an M = 1 product equals row r of an
// M = 7, 64 and 300 product bit for bit, through ops::linear and ops::matmul, F32 and BF16,
// with and without the bias epilogue, on Qwen2.5-0.5B's inference shapes (K = 896, N = 1152:
// fused QKV; K = 4864, N = 896: down projection). The plan count does not grow with M, the
// results agree with the CPU reference, and the default mode stays the per-shape one.
#include <gtest/gtest.h>

#include <ostream>

#include "cuda/cuda_test_utils.h"
#include "microllm/core/random.h"
#include "microllm/cuda/gemm.h"
#include "microllm/ops/gemm_mode.h"
#include "microllm/ops/matmul.h"
#include "ops/op_test_util.h"

using namespace microllm;
using microllm::testing::relative_l2;
using microllm::testing::optest::same_bits;

namespace {

const Device kGpu = Device::cuda(0);
using ops::GemmMode;
using ops::GemmModeGuard;

// The first and last rows, and rows at every offset inside the usual 8 / 16 / 64-row tiles.
constexpr int64_t kRowsToCheck[] = {0, 1, 2, 5, 6, 7, 8, 15, 16, 31, 33, 62, 63};

struct Case {
  int64_t K, N;
  DType dtype;
  bool bias;
};

void PrintTo(const Case& c, std::ostream* out) {
  *out << "K=" << c.K << " N=" << c.N << " " << c.dtype << (c.bias ? " bias" : " no bias");
}

class CudaBatchInvariantLinear : public ::testing::TestWithParam<Case> {};

TEST_P(CudaBatchInvariantLinear, RowsDoNotDependOnHowManyRowsShareTheGemm) {
  MICROLLM_REQUIRE_CUDA();
  const Case c = GetParam();
  Generator gen(21);
  const Tensor x_cpu = randn({300, c.K}, gen).to(c.dtype);  // (M, K)
  const Tensor w_cpu =
      randn({c.N, c.K}, gen, DType::F32, Device::cpu(), 0.0, 0.05).to(c.dtype);  // (N, K)
  const Tensor b_cpu = c.bias ? randn({c.N}, gen).to(c.dtype) : Tensor();        // (N)
  const Tensor x = x_cpu.to(kGpu), w = w_cpu.to(kGpu);
  const Tensor b = c.bias ? b_cpu.to(kGpu) : Tensor();
  EXPECT_EQ(ops::gemm_mode(), GemmMode::fast);  // the default, for training
  GemmModeGuard guard(GemmMode::batch_invariant);
  const Tensor full = ops::linear(x.narrow(0, 0, 64), w, b);  // (64, N)
  const Tensor seven = ops::linear(x.narrow(0, 0, 7), w, b);  // (7, N)
  const Tensor large = ops::linear(x, w, b);                  // (300, N): more than 256 rows
  const int64_t plans = cuda::gemm_invariant_plan_count();
  for (int64_t r : kRowsToCheck) {
    const Tensor one = ops::linear(x.narrow(0, r, 1), w, b);  // (1, N)
    EXPECT_TRUE(same_bits(one, full.narrow(0, r, 1))) << "row " << r << " of M=64";
    EXPECT_TRUE(same_bits(one, large.narrow(0, r, 1))) << "row " << r << " of M=300";
    if (r < 7) EXPECT_TRUE(same_bits(one, seven.narrow(0, r, 1))) << "row " << r << " of M=7";
  }
  EXPECT_TRUE(same_bits(ops::linear(x.narrow(0, 299, 1), w, b), large.narrow(0, 299, 1)));
  // One plan serves every M of this (N, K, dtype, bias).
  EXPECT_EQ(cuda::gemm_invariant_plan_count(), plans);
  // The same rows through matmul reading the weight transposed in place.
  const Tensor full_mm = ops::matmul(x.narrow(0, 0, 64), w, false, true);  // (64, N)
  for (int64_t r : {int64_t(0), int64_t(9), int64_t(63)})
    EXPECT_TRUE(same_bits(ops::matmul(x.narrow(0, r, 1), w, false, true), full_mm.narrow(0, r, 1)))
        << "matmul row " << r;
  // And it is still the right product: CUDA vs the CPU on the same (rounded) inputs.
  const Tensor reference = ops::linear(x_cpu.narrow(0, 0, 64).to(DType::F32), w_cpu.to(DType::F32),
                                       c.bias ? b_cpu.to(DType::F32) : Tensor());  // (64, N)
  const double err = relative_l2(full.to(Device::cpu()).to(DType::F32), reference);
  EXPECT_LT(err, c.dtype == DType::F32 ? 1e-5 : 1e-2) << "relative L2 error " << err;
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, CudaBatchInvariantLinear,
    ::testing::Values(Case{896, 1152, DType::F32, true}, Case{896, 1152, DType::F32, false},
                      Case{4864, 896, DType::F32, true}, Case{4864, 896, DType::F32, false},
                      Case{896, 1152, DType::BF16, true}, Case{896, 1152, DType::BF16, false},
                      Case{4864, 896, DType::BF16, true}, Case{4864, 896, DType::BF16, false}),
    [](const ::testing::TestParamInfo<Case>& info) {
      const Case& c = info.param;
      return "K" + std::to_string(c.K) + "_N" + std::to_string(c.N) + "_" +
             std::string(dtype_name(c.dtype)) + (c.bias ? "_bias" : "_nobias");
    });

TEST(CudaBatchInvariantGemm, FastModeKeepsOnePlanPerShape) {
  MICROLLM_REQUIRE_CUDA();
  Generator gen(22);
  const Tensor w = randn({96, 80}, gen).to(kGpu);  // (N, K)
  const Tensor x = randn({40, 80}, gen).to(kGpu);  // (M, K)
  ASSERT_EQ(ops::gemm_mode(), GemmMode::fast);
  const int64_t fast_before = cuda::gemm_algorithm_cache_size();
  const int64_t invariant_before = cuda::gemm_invariant_plan_count();
  for (int64_t m : {1, 3, 40}) ops::linear(x.narrow(0, 0, m), w);
  EXPECT_EQ(cuda::gemm_algorithm_cache_size() - fast_before, 3);  // one per M, as before
  EXPECT_EQ(cuda::gemm_invariant_plan_count(), invariant_before);
  {
    GemmModeGuard guard(GemmMode::batch_invariant);
    for (int64_t m : {1, 3, 40}) ops::linear(x.narrow(0, 0, m), w);
  }
  EXPECT_EQ(cuda::gemm_invariant_plan_count() - invariant_before, 1);  // one for every M
  EXPECT_EQ(cuda::gemm_algorithm_cache_size() - fast_before, 3);
}

TEST(CudaBatchInvariantGemm, BatchedProductsAreInvariantPerBatchEntry) {
  MICROLLM_REQUIRE_CUDA();
  Generator gen(23);
  for (DType dtype : microllm::testing::kCudaTestDtypes) {
    const Tensor a = randn({3, 50, 72}, gen).to(dtype).to(kGpu);  // (B, M, K)
    const Tensor b = randn({3, 40, 72}, gen).to(dtype).to(kGpu);  // (B, N, K), read transposed
    GemmModeGuard guard(GemmMode::batch_invariant);
    const Tensor full = ops::matmul(a, b, false, true);  // (B, M, N)
    for (int64_t r : {int64_t(0), int64_t(17), int64_t(49)}) {
      const Tensor one = ops::matmul(a.narrow(1, r, 1).contiguous(), b, false, true);  // (B, 1, N)
      EXPECT_TRUE(same_bits(one, full.narrow(1, r, 1))) << dtype << " row " << r;
    }
  }
}

}  // namespace
