// CUDA vs CPU for rms_norm / add_rms_norm, silu / swiglu and rope, forward and backward:
// F32 at SPEC §6 tolerances, BF16 (and F16 on small cases) by relative L2 error. Shapes
// cover one row, widths that are not multiples of the warp or of a 16-byte vector, the
// warp-per-row and block-per-row RMSNorm kernels, enough rows for the chunked dweight sum,
// ≥ 16M elements for the vector path with a tail, views with an unaligned start (scalar
// path) and transposed views.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

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
const DType kAllDtypes[] = {DType::F32, DType::BF16, DType::F16};

// Positions start, start + 1, …, start + T − 1 as a (T) I64 tensor.
Tensor positions_from(int64_t start, int64_t T) {
  std::vector<int64_t> values(static_cast<size_t>(T));
  std::iota(values.begin(), values.end(), start);
  return Tensor::from_vector(values, {T});
}

}  // namespace

// ---- rms_norm -------------------------------------------------------------------------------

TEST(CudaRmsNorm, OddWidthsAndFewRows) {
  MICROLLM_REQUIRE_CUDA();
  struct Case {
    Shape x;
    double eps;
  };
  // Width 1 takes a large eps: with a small one dx = rstd·g·eps/(x² + eps) is a cancellation
  // that F32 cannot resolve to BF16's relative tolerance.
  const std::vector<Case> cases = {{{1, 1}, 0.5},     {{1, 7}, 1e-6},      {{3, 7}, 1e-6},
                                   {{2, 33}, 1e-6},   {{2, 3, 130}, 1e-5}, {{5, 896}, 1e-6},
                                   {{4, 1000}, 1e-6}, {{3, 4100}, 1e-6},   {{1, 8192}, 1e-6},
                                   {{2, 8192}, 1e-5}};
  for (DType dtype : kAllDtypes)
    for (const Case& c : cases) {
      const int64_t C = c.x.back();
      const Tensor x = leaf(c.x, 1), w = leaf({C}, 2, 1.0, 0.5);
      EXPECT_TRUE(cuda_matches_cpu([&](const auto& v) { return ops::rms_norm(v[0], v[1], c.eps); },
                                   {x, w}, in(dtype)))
          << dtype << " x " << shape_str(c.x);
    }
}

TEST(CudaRmsNorm, ManyRowsChunkedWeightGradient) {
  MICROLLM_REQUIRE_CUDA();
  // 8196 rows: more than one grid of row blocks, and a last dweight chunk that is partial.
  // (257, 4100): block-per-row kernel; 4100 is a multiple of 4 but not of 8, so F32 takes
  // the vector path and BF16 the scalar one.
  const std::vector<Shape> shapes = {{4, 2049, 896}, {257, 4100}};
  for (DType dtype : kDtypes)
    for (const Shape& shape : shapes) {
      const Tensor x = leaf(shape, 3), w = leaf({shape.back()}, 4, 1.0, 0.5);
      EXPECT_TRUE(cuda_matches_cpu([](const auto& v) { return ops::rms_norm(v[0], v[1], 1e-6); },
                                   {x, w}, in(dtype)))
          << dtype << " x " << shape_str(shape);
    }
}

TEST(CudaRmsNorm, WeightGradientIsBitwiseDeterministic) {
  MICROLLM_REQUIRE_CUDA();
  Generator gen(5);
  const Tensor x = randn({8196, 896}, gen, DType::F32).to(DType::BF16).to(Device::cuda(0));
  const Tensor dy = randn({8196, 896}, gen, DType::F32).to(DType::BF16).to(Device::cuda(0));
  const Tensor weight = randn({896}, gen, DType::F32, Device::cpu(), 1.0, 0.5).to(DType::BF16);
  auto dweight = [&]() {
    Tensor w = weight.to(Device::cuda(0));
    w.set_requires_grad(true);
    ops::rms_norm(x, w, 1e-6).backward(dy);
    return w.grad().to(Device::cpu()).to_vector_f64();
  };
  const std::vector<double> first = dweight();
  EXPECT_EQ(first, dweight());
}

TEST(CudaRmsNorm, NonContiguousAndUnalignedInputs) {
  MICROLLM_REQUIRE_CUDA();
  for (DType dtype : kDtypes) {
    // (C, R) transposed to (R, C): the op makes it dense.
    for (const Shape& shape : {Shape{896, 5}, Shape{33, 3}}) {
      const Tensor xt = leaf(shape, 6), w = leaf({shape[0]}, 7, 1.0, 0.5);
      EXPECT_TRUE(cuda_matches_cpu(
          [](const auto& v) { return ops::rms_norm(v[0].transpose(0, 1), v[1], 1e-6); }, {xt, w},
          in(dtype)))
          << dtype << " xt " << shape_str(shape);
    }
    // Four rows of width C read from a flat buffer starting one element in: C is a multiple
    // of the 16-byte vector width but the rows are not 16-byte aligned (the scalar path).
    for (int64_t C : {64, 896}) {
      const Tensor flat = leaf({4 * C + 1}, 8), w = leaf({C}, 9, 1.0, 0.5);
      EXPECT_TRUE(cuda_matches_cpu(
          [C](const auto& v) {
            return ops::rms_norm(v[0].narrow(0, 1, 4 * C).reshape({4, C}), v[1], 1e-6);
          },
          {flat, w}, in(dtype)))
          << dtype << " C " << C;
    }
  }
}

TEST(CudaAddRmsNorm, BothOutputsOrOneUsed) {
  MICROLLM_REQUIRE_CUDA();
  for (DType dtype : kDtypes)
    for (const Shape& shape : {Shape{3, 5, 896}, Shape{2, 3, 33}}) {
      const Tensor x = leaf(shape, 10), residual = leaf(shape, 11);
      const Tensor weight = leaf({shape.back()}, 12, 1.0, 0.5);
      // Both outputs feed the result: the sum's gradient is its own plus the norm's.
      EXPECT_TRUE(cuda_matches_cpu(
          [](const auto& v) {
            const auto r = ops::add_rms_norm(v[0], v[1], v[2], 1e-6);
            return ops::concat({r.sum, r.normed}, 0);
          },
          {x, residual, weight}, in(dtype)))
          << dtype << " both, x " << shape_str(shape);
      // Only the normed output.
      EXPECT_TRUE(cuda_matches_cpu(
          [](const auto& v) { return ops::add_rms_norm(v[0], v[1], v[2], 1e-6).normed; },
          {x, residual, weight}, in(dtype)))
          << dtype << " normed, x " << shape_str(shape);
      // Only the sum (the weight gets no gradient, so it is not checked).
      const Tensor frozen = weight.detach().clone();
      EXPECT_TRUE(cuda_matches_cpu(
          [](const auto& v) { return ops::add_rms_norm(v[0], v[1], v[2], 1e-6).sum; },
          {x, residual, frozen}, in(dtype)))
          << dtype << " sum, x " << shape_str(shape);
    }
}

// ---- silu / swiglu --------------------------------------------------------------------------

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

// ---- rope -----------------------------------------------------------------------------------

TEST(CudaRope, PositionsTWithNonZeroStart) {
  MICROLLM_REQUIRE_CUDA();
  struct Case {
    Shape x;  // (B, H, T, D)
    int64_t start;
    double theta;
  };
  const std::vector<Case> cases = {{{1, 1, 1, 2}, 0, 1e4},       {{1, 1, 3, 6}, 5, 100.0},
                                   {{2, 14, 37, 64}, 0, 1e4},    {{2, 14, 37, 64}, 1000, 1e4},
                                   {{1, 14, 19, 128}, 513, 1e6}, {{2, 2, 37, 64}, 7, 1e6}};
  for (DType dtype : kAllDtypes)
    for (const Case& c : cases) {
      const Tensor inv_freq = ops::rope_inv_freq(c.x[3], c.theta);
      EXPECT_TRUE(cuda_matches_cpu([&](const auto& v) { return ops::rope(v[0], v[1], inv_freq); },
                                   {leaf(c.x, 21), positions_from(c.start, c.x[2])}, in(dtype)))
          << dtype << " x " << shape_str(c.x) << " start " << c.start << " theta " << c.theta;
    }
}

TEST(CudaRope, PositionsBTUpTo32k) {
  MICROLLM_REQUIRE_CUDA();
  // (B, T) positions drawn from [0, 32768): large angles, where the fast sin/cos would drift.
  struct Case {
    Shape x;  // (B, H, T, D)
    double theta;
    DType position_dtype;
  };
  const std::vector<Case> cases = {{{3, 14, 17, 64}, 1e4, DType::I64},
                                   {{2, 14, 9, 128}, 1e6, DType::I64},
                                   {{2, 2, 9, 128}, 1e6, DType::I32},
                                   {{3, 14, 1, 64}, 1e6, DType::I64}};  // decode: T = 1
  for (DType dtype : kDtypes)
    for (const Case& c : cases) {
      Generator gen(22);
      const Tensor positions = randint({c.x[0], c.x[2]}, 0, 32768, gen).to(c.position_dtype);
      const Tensor inv_freq = ops::rope_inv_freq(c.x[3], c.theta);
      EXPECT_TRUE(cuda_matches_cpu([&](const auto& v) { return ops::rope(v[0], v[1], inv_freq); },
                                   {leaf(c.x, 23), positions}, in(dtype)))
          << dtype << " x " << shape_str(c.x) << " theta " << c.theta;
    }
  // The largest position itself.
  const Tensor last = Tensor::from_vector(std::vector<int64_t>{32767, 0, 31999}, {3, 1});
  const Tensor inv_freq = ops::rope_inv_freq(128, 1e6);
  EXPECT_TRUE(cuda_matches_cpu([&](const auto& v) { return ops::rope(v[0], v[1], inv_freq); },
                               {leaf({3, 14, 1, 128}, 24), last}, in(DType::F32)));
}

TEST(CudaRope, NonContiguousInput) {
  MICROLLM_REQUIRE_CUDA();
  // Projections come out as (B, T, H, D); rope sees them transposed to (B, H, T, D).
  for (DType dtype : kDtypes)
    for (const Shape& shape : {Shape{2, 11, 14, 64}, Shape{2, 11, 2, 128}}) {
      const Tensor inv_freq = ops::rope_inv_freq(shape[3], 1e6);
      EXPECT_TRUE(cuda_matches_cpu(
          [&](const auto& v) { return ops::rope(v[0].transpose(1, 2), v[1], inv_freq); },
          {leaf(shape, 25), positions_from(3, shape[1])}, in(dtype)))
          << dtype << " x " << shape_str(shape);
    }
}
