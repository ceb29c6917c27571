// Measured GEMM plans (GemmMode::fast, src/cuda/gemm.cpp): a product of at least 2 GFLOP gets
// the fastest of cuBLASLt's candidates that write the heuristic's first candidate's bits. The
// tests compute each product with measured plans off (the first candidate) and on, and ask
// for the same bits: a linear layer's three products at training-like shapes in BF16 (with
// the bias epilogue), an F32 product and a batched one; a product whose output is all zeros
// keeps the first candidate; small products and the off switch make no measured plan.
#include <gtest/gtest.h>

#include <ostream>

#include "cuda/cuda_test_utils.h"
#include "microllm/core/random.h"
#include "microllm/cuda/gemm.h"
#include "microllm/ops/matmul.h"
#include "ops/op_test_util.h"

using namespace microllm;
using microllm::testing::relative_l2;
using microllm::testing::optest::same_bits;

namespace {

const Device kGpu = Device::cuda(0);

// Restores the process-wide setting a test changes.
class MeasuredPlansSetting {
 public:
  MeasuredPlansSetting() : previous_(cuda::gemm_measured_plans()) {}
  ~MeasuredPlansSetting() { cuda::set_gemm_measured_plans(previous_); }
  MeasuredPlansSetting(const MeasuredPlansSetting&) = delete;
  MeasuredPlansSetting& operator=(const MeasuredPlansSetting&) = delete;

 private:
  bool previous_;
};

struct Case {
  const char* name;
  Shape a, b;  // operands as stored
  bool trans_a, trans_b;
  DType dtype;
  bool bias;  // through ops::linear (trans_b, 2-D)
};

void PrintTo(const Case& c, std::ostream* out) { *out << c.name; }

Tensor product(const Case& c, const Tensor& a, const Tensor& b, const Tensor& bias) {
  return c.bias ? ops::linear(a, b, bias) : ops::matmul(a, b, c.trans_a, c.trans_b);
}

class CudaGemmMeasuredPlans : public ::testing::TestWithParam<Case> {};

TEST_P(CudaGemmMeasuredPlans, GiveTheBitsOfTheHeuristicsFirstCandidate) {
  MICROLLM_REQUIRE_CUDA();
  const Case c = GetParam();
  MeasuredPlansSetting restore;
  Generator gen(5);
  const Tensor a = randn(c.a, gen).to(c.dtype).to(kGpu);  // c.a
  const Tensor b =
      randn(c.b, gen, DType::F32, Device::cpu(), 0.0, 0.05).to(c.dtype).to(kGpu);     // c.b
  const Tensor bias = c.bias ? randn({c.b[0]}, gen).to(c.dtype).to(kGpu) : Tensor();  // (N)

  cuda::set_gemm_measured_plans(false);
  const Tensor first = product(c, a, b, bias);  // the heuristic's first candidate
  const cuda::GemmMeasuredPlanCounts before = cuda::gemm_measured_plan_counts();
  cuda::set_gemm_measured_plans(true);
  const Tensor measured = product(c, a, b, bias);  // chooses the plan, then runs it
  const Tensor again = product(c, a, b, bias);     // runs the cached plan
  const cuda::GemmMeasuredPlanCounts after = cuda::gemm_measured_plan_counts();

  EXPECT_EQ(after.made, before.made + 1) << "one measured plan for the new problem";
  EXPECT_TRUE(same_bits(first, measured));
  EXPECT_TRUE(same_bits(first, again));
  // And the product itself is right (against the CPU in F32).
  const Tensor ref =
      product(c, a.to(Device::cpu()).to(DType::F32), b.to(Device::cpu()).to(DType::F32),
              c.bias ? bias.to(Device::cpu()).to(DType::F32) : Tensor());
  EXPECT_LT(relative_l2(measured.to(Device::cpu()).to(DType::F32), ref),
            c.dtype == DType::F32 ? 1e-5 : 1e-2);
  std::printf("[ %s ] measured plans so far %lld, not the first candidate %lld\n", c.name,
              static_cast<long long>(after.made), static_cast<long long>(after.not_first));
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, CudaGemmMeasuredPlans,
    ::testing::Values(
        // a linear layer of 896 → 1152 features over 2,048 tokens: forward, input and weight
        // gradients (4.2 GFLOP each)
        Case{"forward_bf16_bias", {2048, 896}, {1152, 896}, false, true, DType::BF16, true},
        Case{"input_gradient_bf16", {2048, 1152}, {1152, 896}, false, false, DType::BF16, false},
        Case{"weight_gradient_bf16", {2048, 1152}, {2048, 896}, true, false, DType::BF16, false},
        Case{"square_f32", {1024, 1024}, {1024, 1024}, false, false, DType::F32, false},
        Case{"batched_bf16", {4, 512, 1024}, {4, 1024, 512}, false, false, DType::BF16, false}),
    [](const ::testing::TestParamInfo<Case>& info) { return std::string(info.param.name); });

TEST(CudaGemmMeasuredPlansGuards, AnAllZeroOutputKeepsTheFirstCandidate) {
  MICROLLM_REQUIRE_CUDA();
  MeasuredPlansSetting restore;
  cuda::set_gemm_measured_plans(true);
  const Tensor a = Tensor::zeros({1536, 1024}, DType::BF16, kGpu);  // (M, K)
  Generator gen(6);
  const Tensor b = randn({1024, 1536}, gen).to(DType::BF16).to(kGpu);  // (K, N)
  const cuda::GemmMeasuredPlanCounts before = cuda::gemm_measured_plan_counts();
  const Tensor out = ops::matmul(a, b);  // (M, N), 4.8 GFLOP of zeros
  const cuda::GemmMeasuredPlanCounts after = cuda::gemm_measured_plan_counts();
  EXPECT_EQ(after.made, before.made + 1);
  EXPECT_EQ(after.not_first, before.not_first)
      << "a zero output cannot tell summation orders apart";
  EXPECT_TRUE(same_bits(out, Tensor::zeros({1536, 1536}, DType::BF16, kGpu)));
}

TEST(CudaGemmMeasuredPlansGuards, SmallProblemsAndTheOffSwitchMakeNoMeasuredPlan) {
  MICROLLM_REQUIRE_CUDA();
  MeasuredPlansSetting restore;
  Generator gen(7);
  const Tensor a = randn({1280, 1024}, gen).to(DType::BF16).to(kGpu);  // (M, K)
  const Tensor b = randn({1024, 1280}, gen).to(DType::BF16).to(kGpu);  // (K, N): 2.7 GFLOP
  cuda::set_gemm_measured_plans(true);
  const int64_t before = cuda::gemm_measured_plan_counts().made;
  (void)ops::matmul(a.narrow(0, 0, 64), b);  // 0.17 GFLOP: below the threshold
  EXPECT_EQ(cuda::gemm_measured_plan_counts().made, before);
  cuda::set_gemm_measured_plans(false);
  (void)ops::matmul(a, b);  // large enough, but off
  EXPECT_EQ(cuda::gemm_measured_plan_counts().made, before);
  EXPECT_FALSE(cuda::gemm_measured_plans());
}

}  // namespace
