// ops::matmul (OpenBLAS) against ops::matmul_naive (plain loops in F64) on many shapes: sizes
// of 1, odd sizes, every transpose combination, batched and shared operands, and
// non-contiguous views (transposed, narrowed, permuted, expanded, neither stride 1).
//
// The tolerance of each element is relative to Σ_k |a_ik|·|b_kj|, which bounds the rounding
// error of any summation order: 1e-5 for F32 and 1e-12 for F64.
//
// Also linear, and the error paths of matmul, matmul_naive and linear: mismatched K,
// wrong ranks, batch mismatch, mixed or integer dtypes, a bias of the wrong shape.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "microllm/ops/ops.h"
#include "ops/op_test_util.h"

using namespace microllm;
using microllm::testing::optest::randn_tensor;

namespace {

// Σ_k |op(a)_ik|·|op(b)_kj| per output element, through the reference with |a| and |b|.
std::vector<double> magnitude(const Tensor& a, const Tensor& b, bool ta, bool tb) {
  auto abs_of = [](const Tensor& t) {
    std::vector<double> v = t.to_vector_f64();
    for (double& x : v) x = std::fabs(x);
    return Tensor::from_vector(v, t.shape(), DType::F64);
  };
  return ops::matmul_naive(abs_of(a), abs_of(b), ta, tb).to_vector_f64();
}

::testing::AssertionResult matches_naive(const Tensor& a, const Tensor& b, bool ta, bool tb) {
  const double rtol = a.dtype() == DType::F64 ? 1e-12 : 1e-5;
  const Tensor got = ops::matmul(a, b, ta, tb);
  const Tensor want = ops::matmul_naive(a, b, ta, tb);
  if (got.shape() != want.shape())
    return ::testing::AssertionFailure()
           << "shape " << shape_str(got.shape()) << " vs " << shape_str(want.shape());
  if (got.dtype() != a.dtype()) return ::testing::AssertionFailure() << "dtype " << got.dtype();
  const std::vector<double> g = got.to_vector_f64(), w = want.to_vector_f64();
  const std::vector<double> m = magnitude(a, b, ta, tb);
  for (size_t i = 0; i < g.size(); ++i)
    if (!(std::fabs(g[i] - w[i]) <= rtol * m[i] + 1e-300))
      return ::testing::AssertionFailure() << "element " << i << ": blas " << g[i] << ", naive "
                                           << w[i] << ", bound " << rtol * m[i];
  return ::testing::AssertionSuccess();
}

struct Mkn {
  int64_t m, k, n;
};
const Mkn kShapes[] = {{1, 1, 1},  {3, 5, 7},  {17, 33, 65}, {128, 1, 64}, {1, 64, 1},
                       {64, 7, 1}, {1, 9, 31}, {2, 3, 2},    {32, 32, 32}};

// op(a) (M, K) stored as (K, M) when transposed; a leading batch when batch > 0.
Shape stored(int64_t rows, int64_t cols, bool trans, int64_t batch) {
  Shape s = trans ? Shape{cols, rows} : Shape{rows, cols};
  if (batch > 0) s.insert(s.begin(), batch);
  return s;
}

std::string label(const Mkn& s, bool ta, bool tb, DType dtype) {
  return std::to_string(s.m) + "x" + std::to_string(s.k) + "x" + std::to_string(s.n) +
         (ta ? " ta" : "") + (tb ? " tb" : "") + " " + std::string(dtype_name(dtype));
}

}  // namespace

TEST(Matmul, NaiveReferenceIsAMatrixProduct) {
  // [[1, 2], [3, 4]] · [[5, 6], [7, 8]] = [[19, 22], [43, 50]], worked by hand.
  const Tensor a = microllm::testing::optest::f64({1, 2, 3, 4}, {2, 2});
  const Tensor b = microllm::testing::optest::f64({5, 6, 7, 8}, {2, 2});
  EXPECT_EQ(ops::matmul_naive(a, b).to_vector_f64(), (std::vector<double>{19, 22, 43, 50}));
  EXPECT_EQ(ops::matmul_naive(a, b, true, false).to_vector_f64(),
            (std::vector<double>{26, 30, 38, 44}));
  EXPECT_EQ(ops::matmul_naive(a, b, false, true).to_vector_f64(),
            (std::vector<double>{17, 23, 39, 53}));
  EXPECT_EQ(ops::matmul(a, b).to_vector_f64(), (std::vector<double>{19, 22, 43, 50}));
}

TEST(Matmul, TwoDAllShapesAndTransposes) {
  uint64_t seed = 100;
  for (DType dtype : {DType::F32, DType::F64})
    for (const Mkn& s : kShapes)
      for (bool ta : {false, true})
        for (bool tb : {false, true}) {
          SCOPED_TRACE(label(s, ta, tb, dtype));
          const Tensor a = randn_tensor(stored(s.m, s.k, ta, 0), seed++, dtype);
          const Tensor b = randn_tensor(stored(s.k, s.n, tb, 0), seed++, dtype);
          EXPECT_TRUE(matches_naive(a, b, ta, tb));
          // The same products from transposed views of dense storage (strides swapped).
          const Tensor av = randn_tensor(stored(s.m, s.k, !ta, 0), seed++, dtype).transpose(0, 1);
          const Tensor bv = randn_tensor(stored(s.k, s.n, !tb, 0), seed++, dtype).transpose(0, 1);
          EXPECT_TRUE(matches_naive(av, bv, ta, tb));
          EXPECT_TRUE(matches_naive(a, bv, ta, tb));
        }
}

TEST(Matmul, BatchedAndSharedOperands) {
  const Mkn shapes[] = {{1, 1, 1}, {3, 5, 7}, {17, 9, 6}, {1, 8, 5}};
  uint64_t seed = 300;
  for (DType dtype : {DType::F32, DType::F64})
    for (const Mkn& s : shapes)
      for (bool ta : {false, true})
        for (bool tb : {false, true}) {
          SCOPED_TRACE(label(s, ta, tb, dtype));
          const Tensor a3 = randn_tensor(stored(s.m, s.k, ta, 3), seed++, dtype);
          const Tensor b3 = randn_tensor(stored(s.k, s.n, tb, 3), seed++, dtype);
          const Tensor a2 = randn_tensor(stored(s.m, s.k, ta, 0), seed++, dtype);
          const Tensor b2 = randn_tensor(stored(s.k, s.n, tb, 0), seed++, dtype);
          EXPECT_TRUE(matches_naive(a3, b3, ta, tb));  // batched · batched
          EXPECT_TRUE(matches_naive(a2, b3, ta, tb));  // shared a
          EXPECT_TRUE(matches_naive(a3, b2, ta, tb));  // shared b
          EXPECT_EQ(ops::matmul(a2, b3, ta, tb).shape(), (Shape{3, s.m, s.n}));
        }
  // Batch of one.
  EXPECT_TRUE(matches_naive(randn_tensor({1, 4, 3}, 1), randn_tensor({1, 3, 2}, 2), false, false));
}

TEST(Matmul, NonContiguousViews) {
  for (DType dtype : {DType::F32, DType::F64}) {
    SCOPED_TRACE(std::string(dtype_name(dtype)));
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        SCOPED_TRACE(std::string(ta ? "ta " : "") + (tb ? "tb" : ""));
        // Transposed views of dense matrices: op(a) is (5, 7), op(b) is (7, 3).
        const Tensor at = randn_tensor(stored(5, 7, !ta, 0), 1, dtype).transpose(0, 1);
        const Tensor bt = randn_tensor(stored(7, 3, !tb, 0), 2, dtype).transpose(0, 1);
        EXPECT_TRUE(matches_naive(at, bt, ta, tb));
        // Narrowed columns: the row stride is larger than the width.
        const Tensor an = ta ? randn_tensor({7, 9}, 3, dtype).narrow(1, 2, 5)
                             : randn_tensor({5, 11}, 3, dtype).narrow(1, 2, 7);
        const Tensor bn = tb ? randn_tensor({3, 9}, 4, dtype).narrow(1, 1, 7)
                             : randn_tensor({7, 6}, 4, dtype).narrow(1, 1, 3);
        EXPECT_TRUE(matches_naive(an, bn, ta, tb));
        EXPECT_TRUE(matches_naive(at, bn, ta, tb));
        // Batched: batch is the middle dimension of the storage, then permuted first.
        const Shape sa = stored(4, 6, ta, 0), sb = stored(6, 5, tb, 0);
        const Tensor ap = randn_tensor({sa[0], 2, sa[1]}, 5, dtype).permute({1, 0, 2});
        const Tensor bp = randn_tensor({sb[0], 2, sb[1]}, 6, dtype).permute({1, 0, 2});
        EXPECT_TRUE(matches_naive(ap, bp, ta, tb));
        // Neither stride is 1: every other element of each row.
        const Tensor as = randn_tensor({sa[0], sa[1], 2}, 7, dtype).narrow(2, 1, 1).reshape(sa);
        EXPECT_FALSE(as.is_contiguous());
        EXPECT_TRUE(matches_naive(as, randn_tensor(sb, 8, dtype), ta, tb));
        // A batch expanded from one matrix (batch stride 0).
        const Tensor ae = randn_tensor({1, sa[0], sa[1]}, 9, dtype).expand({3, sa[0], sa[1]});
        EXPECT_TRUE(matches_naive(ae, randn_tensor({3, sb[0], sb[1]}, 10, dtype), ta, tb));
      }
  }
}

TEST(Matmul, DegenerateSizes) {
  // K = 0: a sum of nothing is zero.
  EXPECT_EQ(ops::matmul(Tensor::zeros({2, 0}), Tensor::zeros({0, 3})).to_vector_f64(),
            std::vector<double>(6, 0.0));
  // M = 0 or N = 0: empty results of the right shape.
  EXPECT_EQ(ops::matmul(Tensor::zeros({0, 4}), Tensor::zeros({4, 3})).shape(), (Shape{0, 3}));
  EXPECT_EQ(ops::matmul(Tensor::zeros({2, 4, 3}), Tensor::zeros({3, 0})).shape(), (Shape{2, 4, 0}));
}

TEST(Matmul, Bf16MatchesF32OnTheSameValues) {
  const Tensor a = randn_tensor({17, 33}, 11, DType::BF16);
  const Tensor b = randn_tensor({33, 9}, 12, DType::BF16);
  const Tensor got = ops::matmul(a, b);
  EXPECT_EQ(got.dtype(), DType::BF16);
  const std::vector<double> want = ops::matmul(a.to(DType::F32), b.to(DType::F32)).to_vector_f64();
  EXPECT_TRUE(microllm::testing::optest::all_close(got, want, 1e-6, 4e-3));
}

TEST(Matmul, LinearEqualsMatmulWithTransposedWeightPlusBias) {
  const Tensor x = randn_tensor({2, 3, 5}, 13);  // (B, T, in)
  const Tensor w = randn_tensor({4, 5}, 14);     // (out, in)
  const Tensor bias = microllm::testing::optest::f64({1, 2, 3, 4}, {4});
  const Tensor y = ops::linear(x, w, bias);
  EXPECT_EQ(y.shape(), (Shape{2, 3, 4}));
  std::vector<double> want = ops::matmul_naive(x.reshape({6, 5}), w, false, true).to_vector_f64();
  for (size_t i = 0; i < want.size(); ++i) want[i] += static_cast<double>(i % 4 + 1);
  EXPECT_TRUE(microllm::testing::optest::all_close(y, want, 1e-13));
  // A 1-D input is one row.
  EXPECT_EQ(ops::linear(randn_tensor({5}, 15), w).shape(), (Shape{4}));
}

// ---- bad input -------------------------------------------------------------------------------

namespace {
// Zero tensors of a shape, for the error cases.
Tensor f32(const Shape& shape) { return Tensor::zeros(shape, DType::F32); }
Tensor f64(const Shape& shape) { return Tensor::zeros(shape, DType::F64); }
Tensor i64(const Shape& shape) { return Tensor::zeros(shape, DType::I64); }
}  // namespace

TEST(BadInput, Matmul) {
  EXPECT_ERROR(ops::matmul(f32({2, 3}), f32({4, 5})), "matmul", {"(2, 3)", "(4, 5)", "K=3", "K=4"});
  EXPECT_ERROR(ops::matmul(f32({2, 3}), f32({5, 4}), false, true), "matmul",
               {"(5, 4)", "transposed", "K=3", "K=4"});
  EXPECT_ERROR(ops::matmul(f32({3}), f32({3, 2})), "matmul", {"rank 2 or 3", "f32(3,)"});
  EXPECT_ERROR(ops::matmul(f32({1, 2, 3, 4}), f32({4, 2})), "matmul", {"f32(1, 2, 3, 4)"});
  EXPECT_ERROR(ops::matmul(f32({2, 3, 4}), f32({3, 4, 5})), "matmul",
               {"batch", "(2, 3, 4)", "(3, 4, 5)"});
  EXPECT_ERROR(ops::matmul(f32({2, 3}), f64({3, 2})), "matmul", {"f32(2, 3)", "f64(3, 2)"});
  EXPECT_ERROR(ops::matmul(i64({2, 3}), i64({3, 2})), "matmul", {"i64(2, 3)"});
  EXPECT_ERROR(ops::matmul_naive(f32({2, 3}), f32({2, 3})), "matmul_naive",
               {"(2, 3)", "K=3", "K=2"});
}

TEST(BadInput, Linear) {
  EXPECT_ERROR(ops::linear(f32({2, 3}), f32({4, 5})), "linear", {"f32(2, 3)", "f32(4, 5)"});
  EXPECT_ERROR(ops::linear(f32({2, 5}), f32({5})), "linear", {"f32(5,)"});
  EXPECT_ERROR(ops::linear(f32({2, 5}), f32({4, 5}), f32({3})), "linear",
               {"bias", "(4)", "f32(3,)"});
  EXPECT_ERROR(ops::linear(f32({2, 5}), f64({4, 5})), "linear", {"f32(2, 5)", "f64(4, 5)"});
  EXPECT_ERROR(ops::linear(f32({2, 5}), f32({4, 5}), f64({4})), "linear", {"f32(2, 5)", "f64(4,)"});
}
