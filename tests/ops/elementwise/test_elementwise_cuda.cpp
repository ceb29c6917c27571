// CUDA vs CPU for the elementwise operators, forward and backward, F32 at SPEC §6
// tolerances and BF16 by relative L2 error: the binary ops with broadcasting on odd
// shapes, the unary ops on strided views, and ≥ 16M elements for the vector path.
#include <gtest/gtest.h>

#include <utility>
#include <vector>

#include "cuda/cuda_test_utils.h"
#include "microllm/core/random.h"
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

TEST(CudaElementwise, BinaryOpsWithBroadcastingAndOddShapes) {
  MICROLLM_REQUIRE_CUDA();
  const std::vector<std::pair<Shape, Shape>> shapes = {
      {{1}, {1}},       {{7}, {7}},           {{33, 65}, {33, 65}},  {{2, 3, 4}, {3, 1}},
      {{4}, {2, 3, 4}}, {{129, 1}, {1, 257}}, {{5, 1, 7}, {1, 3, 1}}};
  for (DType dtype : kDtypes)
    for (const auto& [sa, sb] : shapes) {
      const Tensor a = leaf(sa, 1), b = leaf(sb, 2, 3.0, 0.5);  // b away from 0 for div
      EXPECT_TRUE(
          cuda_matches_cpu([](const auto& x) { return ops::add(x[0], x[1]); }, {a, b}, in(dtype)));
      EXPECT_TRUE(
          cuda_matches_cpu([](const auto& x) { return ops::sub(x[0], x[1]); }, {a, b}, in(dtype)));
      EXPECT_TRUE(
          cuda_matches_cpu([](const auto& x) { return ops::mul(x[0], x[1]); }, {a, b}, in(dtype)));
      EXPECT_TRUE(
          cuda_matches_cpu([](const auto& x) { return ops::div(x[0], x[1]); }, {a, b}, in(dtype)));
    }
}

TEST(CudaElementwise, UnaryOpsOnStridedViews) {
  MICROLLM_REQUIRE_CUDA();
  for (DType dtype : kDtypes) {
    const Tensor x = leaf({17, 31}, 3);
    const Tensor pos = leaf({17, 31}, 4, 2.0, 0.3);  // positive inputs for log/sqrt/rsqrt
    auto t = [](const Tensor& v) { return v.transpose(0, 1); };  // non-contiguous input
    EXPECT_TRUE(cuda_matches_cpu([&](const auto& v) { return ops::neg(t(v[0])); }, {x}, in(dtype)));
    EXPECT_TRUE(
        cuda_matches_cpu([&](const auto& v) { return ops::scale(t(v[0]), -1.5); }, {x}, in(dtype)));
    EXPECT_TRUE(cuda_matches_cpu([&](const auto& v) { return ops::add_scalar(t(v[0]), 0.25); }, {x},
                                 in(dtype)));
    EXPECT_TRUE(cuda_matches_cpu([&](const auto& v) { return ops::exp(t(v[0])); }, {x}, in(dtype)));
    EXPECT_TRUE(
        cuda_matches_cpu([&](const auto& v) { return ops::pow(t(v[0]), 3.0); }, {pos}, in(dtype)));
    EXPECT_TRUE(
        cuda_matches_cpu([&](const auto& v) { return ops::log(t(v[0])); }, {pos}, in(dtype)));
    EXPECT_TRUE(
        cuda_matches_cpu([&](const auto& v) { return ops::sqrt(t(v[0])); }, {pos}, in(dtype)));
    EXPECT_TRUE(
        cuda_matches_cpu([&](const auto& v) { return ops::rsqrt(t(v[0])); }, {pos}, in(dtype)));
  }
}

TEST(CudaElementwise, LargeTensorTakesTheVectorPath) {
  MICROLLM_REQUIRE_CUDA();
  const int64_t n = (int64_t(1) << 24) + 3;  // ≥ 16M elements, with a tail
  const Tensor a = leaf({n}, 5), b = leaf({n}, 6);
  CudaCheckOptions o;
  o.check_backward = false;
  EXPECT_TRUE(cuda_matches_cpu([](const auto& x) { return ops::mul(x[0], x[1]); }, {a, b}, o));
  o.dtype = DType::BF16;
  EXPECT_TRUE(cuda_matches_cpu([](const auto& x) { return ops::add(x[0], x[1]); }, {a, b}, o));
}
