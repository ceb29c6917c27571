// CUDA vs CPU for the reductions (sum, mean, max, argmax), softmax / log-softmax and
// cross-entropy, forward and backward: F32 at SPEC §6 tolerances, BF16 by relative L2
// error, argmax indices exactly. Shapes cover one element, widths that are not multiples
// of the warp or of a 16-byte vector, the warp-per-row, block-per-row and column reduction
// kernels, a real vocabulary (151,936), ≥ 16M elements, ties, NaN and −inf on purpose,
// and transposed (non-contiguous) inputs.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "cuda/cuda_test_utils.h"
#include "microllm/core/random.h"
#include "microllm/ops/ops.h"

using namespace microllm;
using microllm::testing::cuda_matches_cpu;
using microllm::testing::CudaCheckOptions;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr int64_t kVocab = 151936;  // Qwen's vocabulary

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

// Targets in [0, V) for N rows, every third row (1, 4, 7, …) set to ignore_index.
Tensor make_targets(int64_t N, int64_t V, int64_t ignore_index, DType dtype, uint64_t seed) {
  Generator gen(seed);
  std::vector<int64_t> ids = randint({N}, 0, V, gen).to_vector_i64();
  for (int64_t i = 1; i < N; i += 3) ids[static_cast<size_t>(i)] = ignore_index;
  return Tensor::from_vector(ids, {N}, dtype);
}

}  // namespace

// ---- sum / mean / max / argmax --------------------------------------------------------------

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

// ---- softmax / log_softmax ------------------------------------------------------------------

TEST(CudaSoftmax, AlongLastAndNonLastDims) {
  MICROLLM_REQUIRE_CUDA();
  // Last dims 1, 5, 65 and 151 take the scalar path; 1000 and 4096 the 16-byte vector path.
  const std::vector<Shape> shapes = {{1},         {1, 1},      {3, 5},   {7, 1000},
                                     {4, 33, 65}, {2, 3, 151}, {3, 4096}};
  for (DType dtype : kDtypes)
    for (const Shape& shape : shapes)
      for (int64_t dim = 0; dim < static_cast<int64_t>(shape.size()); ++dim) {
        const Tensor x = leaf(shape, 50 + dim, 0.0, 2.0);
        EXPECT_TRUE(cuda_matches_cpu([&](const auto& v) { return ops::softmax(v[0], dim); }, {x},
                                     in(dtype)))
            << dtype << " softmax " << shape_str(shape) << " dim " << dim;
        EXPECT_TRUE(cuda_matches_cpu([&](const auto& v) { return ops::log_softmax(v[0], dim); },
                                     {x}, in(dtype)))
            << dtype << " log_softmax " << shape_str(shape) << " dim " << dim;
      }
}

TEST(CudaSoftmax, NonContiguousInputs) {
  MICROLLM_REQUIRE_CUDA();
  for (DType dtype : kDtypes) {
    const Tensor x = leaf({65, 33}, 51);
    auto t = [](const Tensor& v) { return v.transpose(0, 1); };  // (33, 65), strided
    for (int64_t dim : {-1, 0}) {
      EXPECT_TRUE(cuda_matches_cpu([&](const auto& v) { return ops::softmax(t(v[0]), dim); }, {x},
                                   in(dtype)))
          << dtype << " softmax dim " << dim;
      EXPECT_TRUE(cuda_matches_cpu([&](const auto& v) { return ops::log_softmax(t(v[0]), dim); },
                                   {x}, in(dtype)))
          << dtype << " log_softmax dim " << dim;
    }
  }
}

TEST(CudaSoftmax, MaskedEntriesGetZeroProbabilityNotNaN) {
  MICROLLM_REQUIRE_CUDA();
  for (int64_t n : {300, 301, 4099}) {  // F32 vector and scalar path, warp and block per row
    const int64_t rows = 6;
    Generator gen(52);
    std::vector<double> v = randn({rows, n}, gen).to_vector_f64();
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t i = 0; i < n; ++i) {
        // Row 0: one finite entry (probability 1); row 1: a causal-mask-like prefix of 41
        // (not 2: with two entries BF16's rounding of y, which no longer sums to 1, swamps
        // the backward's y0·y1·(dy1 − dy0)); other rows: a third masked.
        const bool masked = r == 0 ? i != n / 2 : r == 1 ? i > 40 : (i * 7 + r) % 3 == 0;
        if (masked) v[static_cast<size_t>(r * n + i)] = -kInf;
      }
    Tensor x = Tensor::from_vector(v, {rows, n});
    x.set_requires_grad(true);
    for (DType dtype : kDtypes)
      EXPECT_TRUE(
          cuda_matches_cpu([](const auto& a) { return ops::softmax(a[0], -1); }, {x}, in(dtype)))
          << dtype << " masked softmax n " << n;
    // Log-probabilities of masked entries are −inf: only F32's NaN-aware comparison takes them.
    EXPECT_TRUE(cuda_matches_cpu([](const auto& a) { return ops::log_softmax(a[0], -1); }, {x},
                                 in(DType::F32)))
        << "masked log_softmax n " << n;
    for (DType dtype : kDtypes) {
      const Tensor xd = x.detach().to(dtype).to(Device::cuda(0));
      const std::vector<double> y = ops::softmax(xd, -1).to_vector_f64();
      const std::vector<double> ly = ops::log_softmax(xd, -1).to_vector_f64();
      for (size_t i = 0; i < v.size(); ++i) {
        ASSERT_FALSE(std::isnan(y[i])) << dtype << " softmax element " << i;
        ASSERT_FALSE(std::isnan(ly[i])) << dtype << " log_softmax element " << i;
        if (v[i] == -kInf) {
          EXPECT_EQ(y[i], 0.0) << dtype << " element " << i;
          EXPECT_EQ(ly[i], -kInf) << dtype << " element " << i;
        }
      }
      EXPECT_EQ(y[static_cast<size_t>(n / 2)], 1.0) << dtype;  // row 0: the one finite entry
    }
  }
}

TEST(CudaSoftmax, VocabularyRows) {
  MICROLLM_REQUIRE_CUDA();
  const Tensor x = leaf({33, kVocab}, 53, 0.0, 3.0);
  for (DType dtype : kDtypes) {
    EXPECT_TRUE(
        cuda_matches_cpu([](const auto& v) { return ops::softmax(v[0], -1); }, {x}, in(dtype)))
        << dtype;
    EXPECT_TRUE(
        cuda_matches_cpu([](const auto& v) { return ops::log_softmax(v[0], -1); }, {x}, in(dtype)))
        << dtype;
  }
}

TEST(CudaSoftmax, LargeInput) {
  MICROLLM_REQUIRE_CUDA();
  const Tensor x = leaf({128, 131072}, 54, 0.0, 2.0);  // 16M elements
  EXPECT_TRUE(
      cuda_matches_cpu([](const auto& v) { return ops::softmax(v[0], -1); }, {x}, in(DType::F32)));
  EXPECT_TRUE(cuda_matches_cpu([](const auto& v) { return ops::log_softmax(v[0], -1); }, {x},
                               in(DType::BF16)));
}

TEST(CudaSoftmax, RepeatedRunsAreBitwiseIdentical) {
  MICROLLM_REQUIRE_CUDA();
  const Tensor x = leaf({17, kVocab}, 55).detach().to(Device::cuda(0));
  EXPECT_EQ(ops::softmax(x, -1).to_vector_f32(), ops::softmax(x, -1).to_vector_f32());
  EXPECT_EQ(ops::log_softmax(x, -1).to_vector_f32(), ops::log_softmax(x, -1).to_vector_f32());
}

// ---- cross_entropy --------------------------------------------------------------------------

TEST(CudaCrossEntropy, IgnoredRowsWithInt32AndInt64Targets) {
  MICROLLM_REQUIRE_CUDA();
  const std::vector<std::pair<int64_t, int64_t>> sizes = {
      {1, 1}, {3, 5}, {7, 1000}, {64, 257}, {5, 4096}};
  for (DType dtype : kDtypes)
    for (DType index_dtype : {DType::I64, DType::I32})
      for (const auto& [N, V] : sizes)
        for (int64_t ignore_index :
             {int64_t{-100}, int64_t{0}}) {  // 0: a class id used as the ignore index
          const Tensor logits = leaf({N, V}, 60, 0.0, 2.0);
          const Tensor targets = make_targets(N, V, ignore_index, index_dtype, 61);
          EXPECT_TRUE(cuda_matches_cpu(
              [&](const auto& v) { return ops::cross_entropy(v[0], v[1], ignore_index); },
              {logits, targets}, in(dtype)))
              << dtype << " targets " << index_dtype << " (" << N << ", " << V << ") ignore "
              << ignore_index;
        }
}

TEST(CudaCrossEntropy, AllIgnoredGivesZeroLossAndZeroGradient) {
  MICROLLM_REQUIRE_CUDA();
  for (DType dtype : kDtypes)
    for (DType index_dtype : {DType::I64, DType::I32}) {
      const Tensor logits = leaf({9, 130}, 62);
      const Tensor targets = Tensor::full({9}, -100.0, index_dtype);
      EXPECT_TRUE(cuda_matches_cpu([](const auto& v) { return ops::cross_entropy(v[0], v[1]); },
                                   {logits, targets}, in(dtype)))
          << dtype << " targets " << index_dtype;
      Tensor x = logits.detach().to(dtype).to(Device::cuda(0));
      x.set_requires_grad(true);
      const Tensor loss = ops::cross_entropy(x, targets.to(Device::cuda(0)));
      EXPECT_EQ(loss.item(), 0.0) << dtype;
      loss.backward();
      ASSERT_TRUE(x.grad().defined());
      for (double g : x.grad().to_vector_f64()) ASSERT_EQ(g, 0.0) << dtype;
    }
}

TEST(CudaCrossEntropy, VocabularySizedLogits) {
  MICROLLM_REQUIRE_CUDA();
  const Tensor logits = leaf({33, kVocab}, 63, 0.0, 2.0);
  EXPECT_TRUE(cuda_matches_cpu([](const auto& v) { return ops::cross_entropy(v[0], v[1]); },
                               {logits, make_targets(33, kVocab, -100, DType::I64, 64)},
                               in(DType::F32)));
  EXPECT_TRUE(cuda_matches_cpu([](const auto& v) { return ops::cross_entropy(v[0], v[1]); },
                               {logits, make_targets(33, kVocab, -100, DType::I32, 65)},
                               in(DType::BF16)));
}

TEST(CudaCrossEntropy, NonContiguousLogits) {
  MICROLLM_REQUIRE_CUDA();
  for (DType dtype : kDtypes) {
    const Tensor logits = leaf({257, 19}, 66);  // read as (19, 257) through a transpose
    const Tensor targets = make_targets(19, 257, -100, DType::I64, 67);
    EXPECT_TRUE(cuda_matches_cpu(
        [](const auto& v) { return ops::cross_entropy(v[0].transpose(0, 1), v[1]); },
        {logits, targets}, in(dtype)))
        << dtype;
  }
}

TEST(CudaCrossEntropy, RepeatedRunsAreBitwiseIdentical) {
  MICROLLM_REQUIRE_CUDA();
  const Tensor logits = leaf({300, 5000}, 68).detach().to(Device::cuda(0));
  const Tensor targets = make_targets(300, 5000, -100, DType::I64, 69).to(Device::cuda(0));
  const double first = ops::cross_entropy(logits, targets).item();
  for (int i = 0; i < 3; ++i) EXPECT_EQ(ops::cross_entropy(logits, targets).item(), first);
}
