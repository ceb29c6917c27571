// CUDA vs CPU for silu and swiglu, forward and backward: F32 at SPEC §6 tolerances, BF16
// (and F16 on odd shapes) by relative L2 error. Covers odd shapes, saturated inputs that
// must stay finite, ≥ 16M elements for the vector path with a tail, transposed views and
// views with an unaligned start (scalar path), swiglu over the halves of one matrix.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "cuda/cuda_test_utils.h"
#include "microllm/core/random.h"
#include "microllm/ops/ops.h"
#include "ops/activation/swiglu_halves_check.h"

using namespace microllm;
using microllm::testing::cuda_matches_cpu;
using microllm::testing::CudaCheckOptions;

namespace {

Tensor leaf(const Shape& shape, uint64_t seed, double mean = 0.0, double std = 1.0) {
  return microllm::testing::cuda_test_leaf(shape, seed, mean, std);
}

CudaCheckOptions in(DType dtype) { return microllm::testing::options_in(dtype); }

constexpr const DType (&kDtypes)[2] = microllm::testing::kCudaTestDtypes;
const auto& kAllDtypes = microllm::testing::kCudaFloatDtypes;

}  // namespace

TEST(CudaActivation, SiluSwigluOddShapes) {
  MICROLLM_REQUIRE_CUDA();
  const std::vector<Shape> shapes = {{1}, {7}, {33, 65}, {4, 1000}, {3, 4864}};
  for (DType dtype : kAllDtypes)
    for (const Shape& shape : shapes) {
      const Tensor x = leaf(shape, 13, 0.0, 3.0), up = leaf(shape, 14);
      EXPECT_TRUE(cuda_matches_cpu([](const auto& v) { return ops::silu(v[0]); }, {x}, in(dtype)))
          << dtype << " silu " << shape_str(shape);
      EXPECT_TRUE(cuda_matches_cpu([](const auto& v) { return ops::swiglu(v[0], v[1]); }, {x, up},
                                   in(dtype)))
          << dtype << " swiglu " << shape_str(shape);
    }
}

TEST(CudaActivation, SaturatedInputsStayFinite) {
  MICROLLM_REQUIRE_CUDA();
  const std::vector<double> values = {-100.0, -90.0, -88.5, -40.0, -20.0, -1.0,  -0.0, 0.0,
                                      1.0,    20.0,  40.0,  88.5,  90.0,  100.0, -3.0};
  const int64_t n = static_cast<int64_t>(values.size());
  for (DType dtype : kDtypes) {
    Tensor x = Tensor::from_vector(values, {n});
    x.set_requires_grad(true);
    const Tensor up = leaf({n}, 15);
    EXPECT_TRUE(cuda_matches_cpu([](const auto& v) { return ops::silu(v[0]); }, {x}, in(dtype)))
        << dtype;
    EXPECT_TRUE(
        cuda_matches_cpu([](const auto& v) { return ops::swiglu(v[0], v[1]); }, {x, up}, in(dtype)))
        << dtype;
    // silu(−100) ≈ 0 and silu(100) ≈ 100, never NaN.
    const Tensor xd = x.detach().to(dtype).to(Device::cuda(0));
    const std::vector<double> y = ops::silu(xd).to(Device::cpu()).to_vector_f64();
    for (double v : y) EXPECT_TRUE(std::isfinite(v)) << dtype;
    EXPECT_NEAR(y[0], 0.0, 1e-30) << dtype;
    EXPECT_NEAR(y[13], 100.0, 1e-6) << dtype;
  }
}

TEST(CudaActivation, LargeTensorTakesTheVectorPath) {
  MICROLLM_REQUIRE_CUDA();
  const int64_t n = (int64_t(1) << 24) + 3;  // ≥ 16M elements, with a tail
  const Tensor x = leaf({n}, 16, 0.0, 3.0), up = leaf({n}, 17);
  EXPECT_TRUE(cuda_matches_cpu([](const auto& v) { return ops::silu(v[0]); }, {x}, in(DType::F32)));
  EXPECT_TRUE(cuda_matches_cpu([](const auto& v) { return ops::swiglu(v[0], v[1]); }, {x, up},
                               in(DType::BF16)));
}

TEST(CudaActivation, NonContiguousAndUnalignedInputs) {
  MICROLLM_REQUIRE_CUDA();
  for (DType dtype : kDtypes) {
    // gate (65, 33) transposed to (33, 65).
    const Tensor gate_t = leaf({65, 33}, 18, 0.0, 3.0), up = leaf({33, 65}, 19);
    EXPECT_TRUE(cuda_matches_cpu([](const auto& v) { return ops::silu(v[0].transpose(0, 1)); },
                                 {gate_t}, in(dtype)))
        << dtype;
    EXPECT_TRUE(
        cuda_matches_cpu([](const auto& v) { return ops::swiglu(v[0].transpose(0, 1), v[1]); },
                         {gate_t, up}, in(dtype)))
        << dtype;
    // Rows 1..32 of (33, 65): dense views starting 65 elements in, not 16-byte aligned, so
    // every element takes the scalar loop.
    EXPECT_TRUE(cuda_matches_cpu(
        [](const auto& v) { return ops::swiglu(v[0].narrow(0, 1, 32), v[1].narrow(0, 1, 32)); },
        {leaf({33, 65}, 20, 0.0, 3.0), up}, in(dtype)))
        << dtype;
  }
}

// swiglu over the two halves of one (…, 2F) matrix (the joined gate/up projection, split) reads
// them in place, with 16-byte vectors where F allows (4,864, 64) and element by element where
// it does not (37): the CPU's values and gradients, and the bits of swiglu over dense copies of
// the halves on the same device (value and both gradients).
TEST(CudaActivation, SwigluOverTheHalvesOfOneMatrix) {
  MICROLLM_REQUIRE_CUDA();
  const Device gpu = Device::cuda(0);
  for (DType dtype : kAllDtypes)
    for (int64_t F : {4864, 64, 37}) {
      const auto halves_swiglu = [F](const auto& v) {
        const std::vector<Tensor> h = ops::split(v[0], 2, {F, F});
        return ops::swiglu(h[0], h[1]);
      };
      EXPECT_TRUE(cuda_matches_cpu(halves_swiglu, {leaf({3, 5, 2 * F}, 21, 0.0, 3.0)}, in(dtype)))
          << dtype << " F " << F;
      const Tensor values = leaf({3, 5, 2 * F}, 22, 0.0, 3.0).detach().to(dtype).to(gpu);
      const Tensor dy = leaf({3, 5, F}, 23).detach().to(dtype).to(gpu);  // (3, 5, F)
      EXPECT_TRUE(microllm::testing::swiglu_halves_match_dense_copies(values, dy))
          << dtype << " F " << F;
    }
}
