// CUDA vs CPU for the reductions (sum, mean, max, argmax, sum_all), forward and backward:
// F32 at SPEC §6 tolerances, BF16 by relative L2 error, argmax indices and max values
// exactly. Shapes cover one element, the warp-per-row, block-per-row and column kernels,
// rows and columns in chunks (two passes), ≥ 16M elements, ties, NaN, −inf and signed
// zeros on purpose, an empty dimension, transposed (non-contiguous) inputs, and repeated
// runs that must be bitwise identical.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "cuda/cuda_test_utils.h"
#include "microllm/core/random.h"
#include "microllm/ops/ops.h"
#include "ops/op_test_util.h"

using namespace microllm;
using microllm::testing::cuda_matches_cpu;
using microllm::testing::CudaCheckOptions;
using microllm::testing::optest::same_bits;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

Tensor leaf(const Shape& shape, uint64_t seed, double mean = 0.0, double std = 1.0) {
  return microllm::testing::cuda_test_leaf(shape, seed, mean, std);
}

CudaCheckOptions in(DType dtype) { return microllm::testing::options_in(dtype); }

constexpr const DType (&kDtypes)[2] = microllm::testing::kCudaTestDtypes;

// A (rows, cols) matrix of small integers (0..3), so most rows hold their largest value
// several times, then special rows: 0 all equal; 1 all −inf; 2 NaN at columns cols−1 and
// 1 (the first NaN, column 1, must win); 3 −0.0 (column 1) then +0.0 (last column) as the
// largest value; 4 the largest value in the last column only. Long rows put the pairs in
// different chunks of the two-pass reduction.
Tensor tied_matrix(int64_t rows, int64_t cols, uint64_t seed, bool specials = true) {
  Generator gen(seed);
  std::vector<double> v(static_cast<size_t>(rows * cols));
  for (double& e : v) e = static_cast<double>(gen.next_u64() % 4);
  auto at = [&](int64_t r, int64_t c) -> double& { return v[static_cast<size_t>(r * cols + c)]; };
  if (specials) {
    for (int64_t c = 0; c < cols; ++c) {
      if (rows > 0) at(0, c) = 2.0;
      if (rows > 1) at(1, c) = -kInf;
      if (rows > 3) at(3, c) = -1.0;
      if (rows > 4) at(4, c) = 1.0;
    }
    if (rows > 2 && cols > 1) {
      at(2, cols - 1) = kNaN;
      at(2, 1) = kNaN;
    }
    if (rows > 3 && cols > 2) {
      at(3, 1) = -0.0;
      at(3, cols - 1) = 0.0;
    }
    if (rows > 4) at(4, cols - 1) = 3.0;
  }
  return Tensor::from_vector(v, {rows, cols});
}

// argmax on the CPU and on CUDA in `dtype` over the same values: indices equal exactly.
void expect_same_argmax(const Tensor& x, int64_t dim, bool keepdim, DType dtype) {
  const Tensor cpu = ops::argmax(x.detach().to(dtype).to(DType::F32), dim, keepdim);
  const Tensor cuda = ops::argmax(x.detach().to(dtype).to(Device::cuda(0)), dim, keepdim);
  ASSERT_EQ(cuda.shape(), cpu.shape()) << "argmax of " << x.describe() << " dim " << dim;
  EXPECT_TRUE(cuda.is_cuda());
  EXPECT_EQ(cuda.dtype(), DType::I64);
  EXPECT_EQ(cuda.to_vector_i64(), cpu.to_vector_i64())
      << dtype << " argmax of " << x.describe() << " dim " << dim << " keepdim " << keepdim;
}

// max values on the CPU and on CUDA: equal exactly, NaN, ±inf and the sign of zero included.
void expect_same_max_values(const Tensor& x, int64_t dim, DType dtype) {
  const std::vector<double> cpu =
      ops::max(x.detach().to(dtype).to(DType::F32), dim).to_vector_f64();
  const std::vector<double> cuda =
      ops::max(x.detach().to(dtype).to(Device::cuda(0)), dim).to_vector_f64();
  ASSERT_EQ(cuda.size(), cpu.size());
  for (size_t i = 0; i < cpu.size(); ++i) {
    if (std::isnan(cpu[i])) {
      EXPECT_TRUE(std::isnan(cuda[i])) << dtype << " max " << i << " of " << x.describe();
      continue;
    }
    EXPECT_EQ(cuda[i], cpu[i]) << dtype << " max " << i << " of " << x.describe() << " dim " << dim;
    EXPECT_EQ(std::signbit(cuda[i]), std::signbit(cpu[i]))
        << dtype << " max " << i << " of " << x.describe();
  }
}

}  // namespace

TEST(CudaReduce, SumMeanMaxAlongEveryDimWithAndWithoutKeepdim) {
  MICROLLM_REQUIRE_CUDA();
  // {7, 1000}: warp per row; {3, 1500}: block per row; {2, 33, 65} and {4, 1, 129}: columns;
  // {3, 20000}: rows in chunks (two passes); {20000, 3}: columns in chunks.
  const std::vector<Shape> shapes = {{1},         {1, 1},      {3, 5},     {7, 1000}, {3, 1500},
                                     {2, 33, 65}, {4, 1, 129}, {3, 20000}, {20000, 3}};
  for (DType dtype : kDtypes)
    for (const Shape& shape : shapes)
      for (int64_t dim = 0; dim < static_cast<int64_t>(shape.size()); ++dim)
        for (bool keepdim : {false, true}) {
          CudaCheckOptions o = in(dtype);
          // The CPU sums in F64, CUDA in F32: allow the rounding of an n-term sum.
          o.atol = 5e-5 * std::sqrt(static_cast<double>(std::max<int64_t>(shape[dim], 1)));
          const Tensor x = leaf(shape, 20 + dim);
          EXPECT_TRUE(
              cuda_matches_cpu([&](const auto& v) { return ops::sum(v[0], dim, keepdim); }, {x}, o))
              << dtype << " sum " << shape_str(shape) << " dim " << dim << " keepdim " << keepdim;
          EXPECT_TRUE(cuda_matches_cpu([&](const auto& v) { return ops::mean(v[0], dim, keepdim); },
                                       {x}, o))
              << dtype << " mean " << shape_str(shape) << " dim " << dim << " keepdim " << keepdim;
          EXPECT_TRUE(cuda_matches_cpu([&](const auto& v) { return ops::max(v[0], dim, keepdim); },
                                       {x}, in(dtype)))
              << dtype << " max " << shape_str(shape) << " dim " << dim << " keepdim " << keepdim;
        }
}

TEST(CudaReduce, MaxGradientGoesToTheFirstOfTiedValues) {
  MICROLLM_REQUIRE_CUDA();
  for (DType dtype : kDtypes)
    for (const Shape& shape :
         std::vector<Shape>{{37, 1000}, {5, 3000}, {4, 250, 37}, {6000, 5}, {2, 40000}}) {
      // Values 0..3 only: every row and column holds its maximum many times.
      Tensor x = tied_matrix(shape[0], shape_numel(shape) / shape[0], 30, false).reshape(shape);
      x.set_requires_grad(true);
      for (int64_t dim = 0; dim < static_cast<int64_t>(shape.size()); ++dim)
        EXPECT_TRUE(cuda_matches_cpu([&](const auto& v) { return ops::max(v[0], dim, true); }, {x},
                                     in(dtype)))
            << dtype << " max " << shape_str(shape) << " dim " << dim;
    }
}

TEST(CudaReduce, ArgmaxMatchesExactlyWithTiesNanInfAndSignedZeros) {
  MICROLLM_REQUIRE_CUDA();
  // (37, 1000): warp per row; (5, 3000): block per row; (6, 40000): rows in chunks; their
  // transposes (non-contiguous) along dim 0: the column kernel with n split over thread
  // rows, in chunks for (40000, 6); (6, 7), (9, 33) and (1, 1): tiny.
  const std::vector<std::pair<int64_t, int64_t>> sizes = {{37, 1000}, {5, 3000}, {6, 40000},
                                                          {6, 7},     {1, 1},    {9, 33}};
  for (DType dtype : kDtypes)
    for (const auto& [rows, cols] : sizes) {
      const Tensor x = tied_matrix(rows, cols, 31);
      for (bool keepdim : {false, true}) {
        expect_same_argmax(x, 1, keepdim, dtype);
        expect_same_argmax(x.transpose(0, 1), 0, keepdim, dtype);  // the same columns, strided
        expect_same_argmax(x, 0, keepdim, dtype);
      }
      expect_same_max_values(x, 1, dtype);
      expect_same_max_values(x.transpose(0, 1), 0, dtype);
    }
  // Columns with outer > 1: (4, 250, 37) along dim 1, and a (4, 37, 250) view along dim 2.
  for (DType dtype : kDtypes) {
    const Tensor x3 = tied_matrix(1000, 37, 32).reshape({4, 250, 37});
    expect_same_argmax(x3, 1, false, dtype);
    expect_same_argmax(x3.transpose(1, 2), 2, true, dtype);
    expect_same_argmax(x3, 0, false, dtype);
  }
  // The CPU picks the first NaN (column 1) and the first zero (−0.0, column 1).
  const Tensor special = ops::argmax(tied_matrix(6, 7, 33).to(Device::cuda(0)), 1);
  const std::vector<int64_t> got = special.to_vector_i64();
  EXPECT_EQ(got[0], 0);  // all equal
  EXPECT_EQ(got[1], 0);  // all −inf
  EXPECT_EQ(got[2], 1);  // first NaN
  EXPECT_EQ(got[3], 1);  // −0.0 before +0.0
  // The same rows 40000 long: the pairs now meet in the second pass of the chunked kernel.
  const std::vector<int64_t> long_rows =
      ops::argmax(tied_matrix(6, 40000, 34).to(Device::cuda(0)), 1).to_vector_i64();
  EXPECT_EQ(std::vector<int64_t>(long_rows.begin(), long_rows.begin() + 5),
            (std::vector<int64_t>{0, 0, 1, 1, 39999}));
  EXPECT_EQ(got[4], 6);  // the only maximum, last
}

TEST(CudaReduce, NonContiguousInputs) {
  MICROLLM_REQUIRE_CUDA();
  for (DType dtype : kDtypes) {
    const Tensor x = leaf({33, 65, 7}, 40);
    auto view = [](const Tensor& t) { return t.permute({2, 0, 1}); };  // (7, 33, 65), strided
    for (int64_t dim = 0; dim < 3; ++dim) {
      CudaCheckOptions o = in(dtype);
      o.atol = 5e-5 * 8.1;  // sums of up to 65 terms
      EXPECT_TRUE(
          cuda_matches_cpu([&](const auto& v) { return ops::sum(view(v[0]), dim); }, {x}, o))
          << dtype << " sum dim " << dim;
      EXPECT_TRUE(cuda_matches_cpu([&](const auto& v) { return ops::max(view(v[0]), dim, true); },
                                   {x}, in(dtype)))
          << dtype << " max dim " << dim;
      expect_same_argmax(view(x), dim, false, dtype);
    }
  }
}

TEST(CudaReduce, LargeRowsColumnsAndSumAll) {
  MICROLLM_REQUIRE_CUDA();
  const Tensor x = leaf({128, 131072}, 41);  // 16M elements
  CudaCheckOptions o;
  o.check_backward = false;
  o.atol = 5e-5 * std::sqrt(131072.0);
  EXPECT_TRUE(
      cuda_matches_cpu([](const auto& v) { return ops::sum(v[0], 1); }, {x}, o));  // block per row
  EXPECT_TRUE(
      cuda_matches_cpu([](const auto& v) { return ops::sum(v[0], 0); }, {x}, o));  // columns
  o.atol = 5e-5 * std::sqrt(128.0 * 131072.0);
  EXPECT_TRUE(cuda_matches_cpu([](const auto& v) { return ops::sum_all(v[0]); }, {x},
                               o));  // one row of 16M
  EXPECT_TRUE(
      cuda_matches_cpu([](const auto& v) { return ops::max(v[0], 1); }, {x}, in(DType::F32)));
  o.dtype = DType::BF16;
  EXPECT_TRUE(cuda_matches_cpu([](const auto& v) { return ops::sum(v[0], 1); }, {x}, o));
  expect_same_argmax(x, 1, false, DType::F32);
  expect_same_argmax(x, 0, false, DType::BF16);
}

TEST(CudaReduce, SumOverAnEmptyDimensionIsZero) {
  MICROLLM_REQUIRE_CUDA();
  const Tensor x = Tensor::zeros({3, 0, 4}, DType::F32, Device::cuda(0));
  const Tensor s = ops::sum(x, 1);
  ASSERT_EQ(s.shape(), (Shape{3, 4}));
  for (double v : s.to_vector_f64()) EXPECT_EQ(v, 0.0);
}

TEST(CudaReduce, RepeatedRunsAreBitwiseIdentical) {
  MICROLLM_REQUIRE_CUDA();
  const Tensor x = leaf({64, 50000}, 42).detach().to(Device::cuda(0));
  const std::vector<float> a = ops::sum(x, 1).to_vector_f32(), b = ops::sum(x, 1).to_vector_f32();
  const std::vector<float> c = ops::sum(x, 0).to_vector_f32(), d = ops::sum(x, 0).to_vector_f32();
  EXPECT_EQ(a, b);
  EXPECT_EQ(c, d);
  EXPECT_EQ(ops::sum_all(x).item(), ops::sum_all(x).item());
}

// A sum over 16-byte aligned columns reads runs of 16 bytes a thread, in the order of the
// column kernel: the same bits as the column kernel, which the same values take from a view
// one element off alignment. Shapes: the bias gradient of Qwen2.5-0.5B's joined Q/K/V
// (8,192 × 1,152: two passes), a partial tile of runs, an outer dimension, one pass.
TEST(CudaReduce, ColumnSumsInSixteenByteRunsGiveTheColumnKernelsBits) {
  MICROLLM_REQUIRE_CUDA();
  const Device gpu = Device::cuda(0);
  const std::vector<Shape> shapes = {{8192, 1152}, {300, 264}, {3, 700, 72}, {40, 8}};
  for (DType dtype : {DType::F32, DType::BF16, DType::F16})
    for (const Shape& shape : shapes) {
      int64_t n = 1;
      for (int64_t d : shape) n *= d;
      const Tensor flat = leaf({n + 1}, 43).detach().to(dtype).to(gpu);  // (n + 1)
      const Tensor shifted = flat.narrow(0, 1, n).view(shape);  // one element off alignment
      const Tensor aligned = shifted.clone();
      const int64_t dim = static_cast<int64_t>(shape.size()) - 2;  // over rows, per column
      const Tensor want = ops::sum(shifted, dim), got = ops::sum(aligned, dim);
      EXPECT_TRUE(same_bits(got, want)) << dtype << " " << shape_str(shape);
      CudaCheckOptions o = in(dtype);
      o.check_backward = false;
      o.atol = 5e-5 * std::sqrt(static_cast<double>(shape[dim]));
      EXPECT_TRUE(cuda_matches_cpu([&](const auto& v) { return ops::sum(v[0], dim); },
                                   {leaf(shape, 44)}, o))
          << dtype << " " << shape_str(shape);
    }
}
