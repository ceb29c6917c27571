// CUDA vs CPU for rms_norm and add_rms_norm, forward and backward: F32 at SPEC §6
// tolerances, BF16 (and F16 on small cases) by relative L2 error. Shapes cover one row,
// widths that are not multiples of the warp or of a 16-byte vector, the warp-per-row and
// block-per-row kernels, enough rows for the chunked dweight sum (bitwise deterministic),
// views with an unaligned start (scalar path) and transposed views; the fused backward
// (the default) against the separate kernels (MICROLLM_FUSED_NORM_BACKWARD=0), bit for bit.
#include <gtest/gtest.h>

#include <vector>

#include "cuda/cuda_test_utils.h"
#include "microllm/autograd/node.h"
#include "microllm/core/random.h"
#include "microllm/ops/ops.h"
#include "ops/rms_norm/add_rms_norm_fusion.h"
#include "support/scoped_env.h"

using namespace microllm;
using microllm::testing::bit_equal;
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

// add_rms_norm_out runs the add and the norm in one kernel over dense rows; its two outputs
// must be the bits of add followed by rms_norm (the unfused path, which strided operands
// take), in place or not, at decode widths, odd widths and rows longer than one group per
// thread (BF16 C > 8192, F32 C > 4096). A row's bits must not depend on how many rows share
// the call (the launch shape is derived from C alone).
TEST(CudaAddRmsNorm, OutFormIsTheUnfusedBitsAndRowCountInvariant) {
  MICROLLM_REQUIRE_CUDA();
  autograd::NoGradGuard no_grad;
  for (DType dtype : kAllDtypes)
    for (const int64_t C : std::vector<int64_t>{64, 896, 1000, 1536, 4100, 8200}) {
      const int64_t R = 7;
      const Device gpu = Device::cuda(0);
      const Tensor x = leaf({R, C}, 20).detach().to(dtype).to(gpu);              // (R, C)
      const Tensor residual = leaf({R, C}, 21).detach().to(dtype).to(gpu);       // (R, C)
      const Tensor weight = leaf({C}, 22, 1.0, 0.5).detach().to(dtype).to(gpu);  // (C)
      const Tensor want_sum = ops::add(x, residual);
      const Tensor want_normed = ops::rms_norm(want_sum, weight, 1e-6);
      const Tensor sum = Tensor::empty({R, C}, dtype, x.device());
      const Tensor normed = Tensor::empty({R, C}, dtype, x.device());
      ops::add_rms_norm_out(x, residual, weight, 1e-6, sum, normed);
      EXPECT_TRUE(bit_equal(sum, want_sum)) << dtype << " C " << C;
      EXPECT_TRUE(bit_equal(normed, want_normed)) << dtype << " C " << C;
      // In place into the residual stream.
      const Tensor stream = x.clone();
      ops::add_rms_norm_out(stream, residual, weight, 1e-6, stream, normed);
      EXPECT_TRUE(bit_equal(stream, want_sum)) << dtype << " C " << C << " in place";
      EXPECT_TRUE(bit_equal(normed, want_normed)) << dtype << " C " << C << " in place";
      // Row 3 alone.
      const Tensor one_sum = Tensor::empty({1, C}, dtype, x.device());
      const Tensor one_normed = Tensor::empty({1, C}, dtype, x.device());
      ops::add_rms_norm_out(x.narrow(0, 3, 1), residual.narrow(0, 3, 1), weight, 1e-6, one_sum,
                            one_normed);
      EXPECT_TRUE(bit_equal(one_normed, want_normed.narrow(0, 3, 1))) << dtype << " C " << C;
      ops::rms_norm_out(want_sum.narrow(0, 3, 1), weight, 1e-6, one_normed);
      EXPECT_TRUE(bit_equal(one_normed, want_normed.narrow(0, 3, 1))) << dtype << " C " << C;
    }
}

// add_rms_norm on CUDA runs the add, the norm and its rstd in one kernel and adds the sum's
// own gradient inside the norm's dx kernel: the bits of add → rms_norm, outputs and every
// gradient, at training widths, odd widths and long rows.
TEST(CudaAddRmsNorm, FusedNodeIsItsCompositionBitForBit) {
  MICROLLM_REQUIRE_CUDA();
  for (DType dtype : kAllDtypes)
    for (const Shape& shape : {Shape{4, 64, 896}, Shape{5, 33}, Shape{3, 8200}})
      EXPECT_TRUE(
          microllm::testing::add_rms_norm_is_its_composition(shape, dtype, Device::cuda(0)));
}

// dx and the weight gradient's partial sums in one kernel (the default;
// MICROLLM_FUSED_NORM_BACKWARD=0 gives the separate kernels) give the two kernels' bits, for
// rms_norm and add_rms_norm (whose backward adds the residual's gradient), at the training shape
// (8,192 × 896), few rows, rows not a multiple of the row lanes, widths off the 16-byte path, and a
// width past one warp's row (the separate kernels).
TEST(CudaRmsNorm, FusedBackwardGivesTheSeparateKernelsBits) {
  MICROLLM_REQUIRE_CUDA();
  const Device gpu = Device::cuda(0);
  struct Case {
    int64_t rows, C;
  };
  const std::vector<Case> cases = {{8192, 896}, {1, 896},   {37, 896},
                                   {1000, 100}, {65, 1024}, {33, 1536}};
  for (DType dtype : microllm::testing::kCudaFloatDtypes)
    for (const Case& c : cases)
      for (bool add : {false, true}) {
        Generator gen(11);
        const Tensor x0 = randn({c.rows, c.C}, gen, dtype, gpu, 0.0, 1.0);
        const Tensor r0 = randn({c.rows, c.C}, gen, dtype, gpu, 0.0, 1.0);
        const Tensor w0 = randn({c.C}, gen, dtype, gpu, 1.0, 0.1);
        const Tensor g_normed = randn({c.rows, c.C}, gen, dtype, gpu, 0.0, 1.0);
        const Tensor g_sum = randn({c.rows, c.C}, gen, dtype, gpu, 0.0, 1.0);
        auto grads = [&](const char* fused) {
          const microllm::testing::ScopedEnv env("MICROLLM_FUSED_NORM_BACKWARD", fused);
          Tensor x = x0.clone(), r = r0.clone(), w = w0.clone();
          x.set_requires_grad(true);
          r.set_requires_grad(true);
          w.set_requires_grad(true);
          if (add) {
            const ops::AddRmsNormResult out = ops::add_rms_norm(x, r, w, 1e-6);
            autograd::run_backward({out.normed, out.sum}, {g_normed, g_sum});
          } else {
            ops::rms_norm(x, w, 1e-6).backward(g_normed);
          }
          return std::vector<Tensor>{x.grad(), add ? r.grad() : Tensor(), w.grad()};
        };
        const std::vector<Tensor> separate = grads("0"), fused = grads("1");
        const std::string where = std::string(dtype_name(dtype)) + " rows " +
                                  std::to_string(c.rows) + " C " + std::to_string(c.C) +
                                  (add ? " add" : "");
        for (size_t i = 0; i < separate.size(); ++i) {
          if (!separate[i].defined()) continue;
          EXPECT_TRUE(bit_equal(fused[i], separate[i])) << where << " gradient " << i;
        }
      }
}
