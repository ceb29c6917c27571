// GemmMode::batch_invariant on the CPU: row r of an M = 1 product equals row r of an
// M = 64 (and M = 7) product bit for bit, through ops::linear and ops::matmul, F32 and BF16,
// with and without bias, on the inference shapes of Qwen2.5-0.5B (K = 896, N = 1152: fused
// QKV; K = 4864, N = 896: down projection). The invariant kernel is also held to the F64
// loop reference, and the mode to its per-thread scope.
#include <gtest/gtest.h>

#include <ostream>
#include <thread>

#include "microllm/core/random.h"
#include "microllm/ops/gemm_mode.h"
#include "microllm/ops/matmul.h"
#include "ops/op_test_util.h"

using namespace microllm;
using microllm::testing::optest::same_bits;

namespace {

using ops::GemmMode;
using ops::GemmModeGuard;

// Rows that cover every position inside a 4-row tile, the first and the last.
constexpr int64_t kRowsToCheck[] = {0, 1, 2, 3, 5, 6, 17, 62, 63};

struct Case {
  int64_t K, N;
  DType dtype;
  bool bias;
};

void PrintTo(const Case& c, std::ostream* out) {
  *out << "K=" << c.K << " N=" << c.N << " " << c.dtype << (c.bias ? " bias" : " no bias");
}

class BatchInvariantLinear : public ::testing::TestWithParam<Case> {};

TEST_P(BatchInvariantLinear, RowsOfOneRowAndSixtyFourRowProductsAreIdentical) {
  const Case c = GetParam();
  Generator gen(11);
  const Tensor x = randn({64, c.K}, gen).to(c.dtype);  // (M, K)
  const Tensor w =
      randn({c.N, c.K}, gen, DType::F32, Device::cpu(), 0.0, 0.05).to(c.dtype);  // (N, K)
  const Tensor b = c.bias ? randn({c.N}, gen).to(c.dtype) : Tensor();            // (N)
  GemmModeGuard guard(GemmMode::batch_invariant);
  const Tensor full = ops::linear(x, w, b);                   // (64, N)
  const Tensor seven = ops::linear(x.narrow(0, 0, 7), w, b);  // (7, N): an edge tile
  for (int64_t r : kRowsToCheck) {
    const Tensor one = ops::linear(x.narrow(0, r, 1), w, b);  // (1, N)
    EXPECT_TRUE(same_bits(one, full.narrow(0, r, 1))) << "row " << r;
    if (r < 7) EXPECT_TRUE(same_bits(one, seven.narrow(0, r, 1))) << "row " << r << " of M=7";
  }
  // The same rows through matmul with the weight read transposed in place.
  const Tensor full_mm = ops::matmul(x, w, false, true);  // (64, N)
  for (int64_t r : {int64_t(0), int64_t(6), int64_t(63)})
    EXPECT_TRUE(same_bits(ops::matmul(x.narrow(0, r, 1), w, false, true), full_mm.narrow(0, r, 1)))
        << "matmul row " << r;
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, BatchInvariantLinear,
    ::testing::Values(Case{896, 1152, DType::F32, true}, Case{896, 1152, DType::F32, false},
                      Case{4864, 896, DType::F32, false}, Case{4864, 896, DType::F32, true},
                      Case{896, 1152, DType::BF16, true}, Case{4864, 896, DType::BF16, false}),
    [](const ::testing::TestParamInfo<Case>& info) {
      const Case& c = info.param;
      return "K" + std::to_string(c.K) + "_N" + std::to_string(c.N) + "_" +
             std::string(dtype_name(c.dtype)) + (c.bias ? "_bias" : "_nobias");
    });

TEST(BatchInvariantMatmul, PackedOperandsAndBatchesAreInvariantToo) {
  // b stored (K, N) (not transposed: packed into (N, K) rows), a read transposed, 3-D batch.
  Generator gen(12);
  const Tensor a_t = randn({3, 33, 40}, gen);  // (B, K, M): op(a) = aᵀ (B, M, K)
  const Tensor b = randn({3, 33, 21}, gen);    // (B, K, N)
  GemmModeGuard guard(GemmMode::batch_invariant);
  const Tensor full = ops::matmul(a_t, b, true, false);  // (B, M, N)
  for (int64_t r : {int64_t(0), int64_t(3), int64_t(38), int64_t(39)}) {
    const Tensor one = ops::matmul(a_t.narrow(2, r, 1), b, true, false);  // (B, 1, N)
    EXPECT_TRUE(same_bits(one, full.narrow(1, r, 1))) << "row " << r;
  }
}

TEST(BatchInvariantMatmul, AgreesWithTheF64Reference) {
  Generator gen(13);
  for (DType dtype : {DType::F32, DType::F64}) {
    const Tensor a = randn({37, 131}, gen).to(dtype);  // (M, K): K % lanes ≠ 0
    const Tensor b = randn({131, 29}, gen).to(dtype);  // (K, N)
    const Tensor expected = ops::matmul_naive(a, b);   // (M, N), accumulated in F64
    GemmModeGuard guard(GemmMode::batch_invariant);
    const Tensor got = ops::matmul(a, b).to(DType::F64);
    const std::vector<double> g = got.to_vector_f64(), e = expected.to_vector_f64();
    ASSERT_EQ(g.size(), e.size());
    const double tol = dtype == DType::F32 ? 1e-4 : 1e-12;  // K = 131 terms of N(0, 1)²
    for (size_t i = 0; i < g.size(); ++i) ASSERT_NEAR(g[i], e[i], tol) << dtype << " element " << i;
  }
}

TEST(GemmModeScope, DefaultsToFastNestsAndIsPerThread) {
  EXPECT_EQ(ops::gemm_mode(), GemmMode::fast);
  {
    GemmModeGuard outer(GemmMode::batch_invariant);
    EXPECT_EQ(ops::gemm_mode(), GemmMode::batch_invariant);
    GemmMode seen_elsewhere = GemmMode::batch_invariant;
    std::thread other([&] { seen_elsewhere = ops::gemm_mode(); });
    other.join();
    EXPECT_EQ(seen_elsewhere, GemmMode::fast);
    {
      GemmModeGuard inner(GemmMode::fast);
      EXPECT_EQ(ops::gemm_mode(), GemmMode::fast);
    }
    EXPECT_EQ(ops::gemm_mode(), GemmMode::batch_invariant);
  }
  EXPECT_EQ(ops::gemm_mode(), GemmMode::fast);
}

}  // namespace
