// CUDA vs CPU for rope, forward and backward: F32 at SPEC §6 tolerances, BF16 (and F16 for
// (T) positions) by relative L2 error. Covers (T) positions with a non-zero start, (B, T)
// positions up to 32k (I64 and I32) where a fast sin/cos would drift, decode (T = 1), and
// transposed (non-contiguous) input; the runs-of-four kernel against the per-pair one.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <numeric>
#include <string>
#include <vector>

#include "cuda/cuda_test_utils.h"
#include "microllm/core/random.h"
#include "microllm/ops/ops.h"
#include "ops/op_test_util.h"
#include "ops/rope/rope_kernels.h"
#include "support/scoped_env.h"

using namespace microllm;
using microllm::testing::cuda_matches_cpu;
using microllm::testing::CudaCheckOptions;
using microllm::testing::optest::same_bits;

namespace {

Tensor leaf(const Shape& shape, uint64_t seed, double mean = 0.0, double std = 1.0) {
  return microllm::testing::cuda_test_leaf(shape, seed, mean, std);
}

CudaCheckOptions in(DType dtype) { return microllm::testing::options_in(dtype); }

constexpr const DType (&kDtypes)[2] = microllm::testing::kCudaTestDtypes;
const auto& kAllDtypes = microllm::testing::kCudaFloatDtypes;

// Positions start, start + 1, …, start + T − 1 as a (T) I64 tensor.
Tensor positions_from(int64_t start, int64_t T) {
  std::vector<int64_t> values(static_cast<size_t>(T));
  std::iota(values.begin(), values.end(), start);
  return Tensor::from_vector(values, {T});
}

}  // namespace

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

// A case small enough to check by hand: x = 1, positions {0, 1, 2, 7} as (T) and as (B, T),
// inv_freq {1, 0.01}; y[i] = cos θ − sin θ, y[i + 2] = cos θ + sin θ with θ = position ·
// inv_freq[i] (host std::cos/sin in F32). Both position dtypes.
TEST(CudaRope, SmallCaseByTheFormula) {
  MICROLLM_REQUIRE_CUDA();
  const std::vector<int64_t> pos = {0, 1, 2, 7};
  const Tensor inv_freq = Tensor::from_vector(std::vector<float>{1.0f, 0.01f}, {2});
  for (DType index : {DType::I64, DType::I32}) {
    for (bool per_batch : {false, true}) {
      const int64_t B = 2;
      const Tensor x = Tensor::ones({B, 1, 4, 4}, DType::F32, Device::cuda(0));
      Tensor positions = Tensor::from_vector(pos, {4}, index);
      if (per_batch)
        positions =
            Tensor::from_vector(std::vector<int64_t>{0, 1, 2, 7, 0, 1, 2, 7}, {B, 4}, index);
      const std::vector<float> y =
          ops::rope(x, positions.to(Device::cuda(0)), inv_freq).to_vector_f32();
      for (int64_t b = 0; b < B; ++b)
        for (int64_t t = 0; t < 4; ++t)
          for (int64_t i = 0; i < 2; ++i) {
            const float angle = static_cast<float>(pos[t]) * (i == 0 ? 1.0f : 0.01f);
            const float c = std::cos(angle), s = std::sin(angle);
            const size_t lo = static_cast<size_t>((b * 4 + t) * 4 + i);
            EXPECT_NEAR(y[lo], c - s, 1e-5) << "b " << b << " t " << t << " i " << i << " "
                                            << dtype_name(index) << " per_batch " << per_batch;
            EXPECT_NEAR(y[lo + 2], c + s, 1e-5) << "b " << b << " t " << t << " i " << i;
          }
    }
  }
}

// With the runs on (the default; the test sets MICROLLM_ROPE_RUNS=1 so that a run of the suite
// with MICROLLM_ROPE_RUNS=0 still checks them), where D/2, the strides and the pointers allow, a
// thread takes a run of four pairs with wide accesses; otherwise one pair. Both give the same bits:
// the same x read at an address two elements off its alignment (the per-pair kernel) and at an
// aligned one (the runs), with the forward and the inverse angle, in place and not.
TEST(CudaRope, RunsOfFourPairsGiveThePerPairBits) {
  MICROLLM_REQUIRE_CUDA();
  const Device gpu = Device::cuda(0);
  const microllm::testing::ScopedEnv runs("MICROLLM_ROPE_RUNS", "1");
  for (DType dtype : kAllDtypes)
    for (const Shape& shape : {Shape{2, 3, 5, 64}, Shape{1, 2, 7, 128}}) {
      const int64_t n = shape[0] * shape[1] * shape[2] * shape[3];
      const Tensor flat = leaf({n + 2}, 26).detach().to(dtype).to(gpu);  // (n + 2)
      const Tensor shifted = flat.narrow(0, 2, n).view(shape);  // (B, H, T, D), 2 elements off
      const Tensor aligned = shifted.clone();                   // (B, H, T, D)
      Generator gen(27);
      const Tensor positions = randint({shape[0], shape[2]}, 0, 32768, gen).to(DType::I32).to(gpu);
      const Tensor inv_freq = ops::rope_inv_freq(shape[3], 1e6).to(gpu);  // (D/2) F32
      for (bool inverse : {false, true}) {
        const Tensor want = Tensor::empty(shape, dtype, gpu);
        ops::rope_cuda(shifted, positions, inv_freq, inverse, want);
        const Tensor got = Tensor::empty(shape, dtype, gpu);
        ops::rope_cuda(aligned, positions, inv_freq, inverse, got);
        EXPECT_TRUE(same_bits(got, want)) << dtype << " " << shape_str(shape) << " " << inverse;
        const Tensor in_place = aligned.clone();
        ops::rope_cuda(in_place, positions, inv_freq, inverse, in_place);
        EXPECT_TRUE(same_bits(in_place, want)) << dtype << " in place " << inverse;
      }
    }
}
