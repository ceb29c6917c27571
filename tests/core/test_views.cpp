// Tensor views: shapes, strides (in elements) and offsets of reshape/view, permute/transpose,
// narrow/slice, expand, squeeze/unsqueeze and flatten; storage sharing versus copying
// (contiguous, clone, to); copy_from between strided layouts; from_storage bounds; and the
// gradients that flow back through views. Expected values are computed here from index
// arithmetic on a tensor whose element at linear index i holds the value i.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "core/expect_error.h"
#include "microllm/autograd/node.h"
#include "microllm/core/tensor.h"
#include "microllm/ops/ops.h"

using namespace microllm;
using microllm::testing::throws_error;

namespace {

// A dense tensor whose element at row-major linear index i holds i.
Tensor iota(const Shape& shape, DType dtype = DType::F32) {
  std::vector<double> values(static_cast<size_t>(shape_numel(shape)));
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<double>(i);
  return Tensor::from_vector(values, shape, dtype);
}

bool shares_storage(const Tensor& a, const Tensor& b) {
  return a.storage().get() == b.storage().get();
}

// Value of element `index` of a view, read through its own strides and offset.
double at(const Tensor& t, const std::vector<int64_t>& index) {
  int64_t flat = 0;
  std::vector<double> all = t.to_vector_f64();
  for (size_t d = 0; d < index.size(); ++d) flat = flat * t.shape()[d] + index[d];
  return all[static_cast<size_t>(flat)];
}

// Writes `value` through the view's data pointer at `index` (F32 tensors).
void poke(const Tensor& t, const std::vector<int64_t>& index, float value) {
  int64_t offset = 0;
  for (size_t d = 0; d < index.size(); ++d) offset += index[d] * t.strides()[d];
  t.data<float>()[offset] = value;
}

}  // namespace

// ---- reshape / view ----------------------------------------------------------------------

TEST(Views, ReshapeOfContiguousIsAView) {
  Tensor t = iota({2, 3, 4});    // (2, 3, 4)
  Tensor r = t.reshape({4, 6});  // (4, 6)
  EXPECT_TRUE(shares_storage(t, r));
  EXPECT_EQ(r.shape(), (Shape{4, 6}));
  EXPECT_EQ(r.strides(), (Strides{6, 1}));
  EXPECT_EQ(r.offset(), 0);
  EXPECT_EQ(r.to_vector_f64(), t.to_vector_f64());
  // r[1][2] is linear element 8 = t[0][2][0]; a write through r shows in t.
  poke(r, {1, 2}, -5.0f);
  EXPECT_EQ(at(t, {0, 2, 0}), -5.0);
  EXPECT_EQ(t.to_vector_f64()[8], -5.0);
}

TEST(Views, ReshapeInfersMinusOne) {
  Tensor t = iota({2, 3, 4});
  EXPECT_EQ(t.reshape({-1, 4}).shape(), (Shape{6, 4}));
  EXPECT_EQ(t.reshape({3, -1, 2}).shape(), (Shape{3, 4, 2}));
  EXPECT_EQ(t.reshape({-1}).shape(), (Shape{24}));
  EXPECT_EQ(t.view({2, -1}).shape(), (Shape{2, 12}));
  EXPECT_TRUE(throws_error([&] { t.reshape({-1, -1}); }, "reshape", {"only one", "(-1, -1)"}));
  EXPECT_TRUE(throws_error([&] { t.reshape({5, -1}); }, "reshape", {"(2, 3, 4)", "(5, -1)"}));
  EXPECT_TRUE(throws_error(
      [&] {
        t.reshape({5, 5});
      },
      "reshape", {"(2, 3, 4)", "24 elements", "(5, 5)"}));
  EXPECT_TRUE(throws_error([&] { t.view({7}); }, "view", {"(7,)"}));
}

TEST(Views, ReshapeOfTransposeCopies) {
  Tensor t = iota({2, 3});        // (2, 3)
  Tensor tt = t.transpose(0, 1);  // (3, 2) strides (1, 3)
  Tensor r = tt.reshape({6});     // needs row-major order of tt: a copy
  EXPECT_FALSE(shares_storage(t, r));
  EXPECT_TRUE(r.is_contiguous());
  // tt[i][j] = t[j][i] = 3j + i, read row by row.
  EXPECT_EQ(r.to_vector_f64(), (std::vector<double>{0, 3, 1, 4, 2, 5}));
  poke(r, {0}, 42.0f);  // the copy is independent of t
  EXPECT_EQ(t.to_vector_f64()[0], 0.0);
  // view() refuses the same request and says what to do instead.
  EXPECT_TRUE(
      throws_error([&] { tt.view({6}); }, "view", {"(3, 2)", "(1, 3)", "(6,)", "reshape()"}));
}

TEST(Views, ReshapeSplitsStridedDimsWithoutCopy) {
  Tensor t = iota({4, 6});          // (4, 6)
  Tensor n = t.narrow(1, 0, 3);     // (4, 3) strides (6, 1): rows are not adjacent
  Tensor r = n.reshape({2, 2, 3});  // splitting dim 0 needs no copy
  EXPECT_TRUE(shares_storage(t, r));
  EXPECT_EQ(r.strides(), (Strides{12, 6, 1}));
  for (int64_t a = 0; a < 2; ++a)
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t c = 0; c < 3; ++c) EXPECT_EQ(at(r, {a, b, c}), (2 * a + b) * 6 + c);
  // Merging the rows of n is impossible without a copy.
  Tensor flat = n.reshape({12});
  EXPECT_FALSE(shares_storage(t, flat));
  EXPECT_EQ(flat.to_vector_f64(), (std::vector<double>{0, 1, 2, 6, 7, 8, 12, 13, 14, 18, 19, 20}));
  EXPECT_TRUE(throws_error([&] { n.view({12}); }, "view", {"(4, 3)", "(6, 1)"}));
  // The transpose of (2, 3) viewed with size-1 dimensions added needs no copy either.
  Tensor tt = iota({2, 3}).transpose(0, 1);  // (3, 2) strides (1, 3)
  Tensor u = tt.view({3, 1, 2});
  EXPECT_EQ(u.strides()[0], 1);
  EXPECT_EQ(u.strides()[2], 3);
  EXPECT_EQ(at(u, {2, 0, 1}), 5.0);  // tt[2][1] = t[1][2]
}

TEST(Views, ViewOfExpandedTensor) {
  Tensor t = iota({3});                      // (3)
  Tensor e = t.unsqueeze(0).expand({4, 3});  // (4, 3) strides (0, 1)
  EXPECT_TRUE(throws_error([&] { e.view({12}); }, "view", {"(4, 3)", "(0, 1)"}));
  Tensor r = e.reshape({12});
  EXPECT_FALSE(shares_storage(t, r));
  EXPECT_EQ(r.to_vector_f64(), (std::vector<double>{0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2}));
  Tensor s = e.view({2, 2, 3});  // splitting the stride-0 dim is a view
  EXPECT_EQ(s.strides(), (Strides{0, 0, 1}));
}

// ---- permute / transpose -----------------------------------------------------------------

TEST(Views, PermuteShapeStridesValues) {
  Tensor t = iota({2, 3, 4});       // strides (12, 4, 1)
  Tensor p = t.permute({2, 0, 1});  // (4, 2, 3)
  EXPECT_TRUE(shares_storage(t, p));
  EXPECT_EQ(p.shape(), (Shape{4, 2, 3}));
  EXPECT_EQ(p.strides(), (Strides{1, 12, 4}));
  EXPECT_FALSE(p.is_contiguous());
  for (int64_t k = 0; k < 4; ++k)
    for (int64_t i = 0; i < 2; ++i)
      for (int64_t j = 0; j < 3; ++j) EXPECT_EQ(at(p, {k, i, j}), i * 12 + j * 4 + k);
  EXPECT_EQ(t.permute({-1, 0, -2}).shape(), (Shape{4, 2, 3}));
  EXPECT_TRUE(throws_error([&] { t.permute({0, 0, 1}); }, "permute", {"repeats"}));
  EXPECT_TRUE(throws_error([&] { t.permute({1, 0}); }, "permute", {"expected 3", "(2, 3, 4)"}));
  EXPECT_TRUE(throws_error([&] { t.permute({0, 1, 3}); }, "permute", {"dimension 3"}));
}

TEST(Views, TransposeWithNegativeDims) {
  Tensor t = iota({2, 3, 4});
  Tensor tt = t.transpose(-1, 0);  // (4, 3, 2)
  EXPECT_EQ(tt.shape(), (Shape{4, 3, 2}));
  EXPECT_EQ(tt.strides(), (Strides{1, 4, 12}));
  for (int64_t k = 0; k < 4; ++k)
    for (int64_t j = 0; j < 3; ++j)
      for (int64_t i = 0; i < 2; ++i) EXPECT_EQ(at(tt, {k, j, i}), i * 12 + j * 4 + k);
  // Transposing twice gives back the original layout.
  Tensor back = tt.transpose(0, 2);
  EXPECT_TRUE(back.is_contiguous());
  EXPECT_EQ(back.to_vector_f64(), t.to_vector_f64());
}

// ---- narrow / slice ----------------------------------------------------------------------

TEST(Views, NarrowMovesOffset) {
  Tensor t = iota({4, 5});          // strides (5, 1)
  Tensor cols = t.narrow(1, 1, 3);  // (4, 3)
  EXPECT_EQ(cols.shape(), (Shape{4, 3}));
  EXPECT_EQ(cols.strides(), (Strides{5, 1}));
  EXPECT_EQ(cols.offset(), 1);
  for (int64_t i = 0; i < 4; ++i)
    for (int64_t j = 0; j < 3; ++j) EXPECT_EQ(at(cols, {i, j}), i * 5 + 1 + j);
  Tensor rows = t.narrow(0, 2, 2);  // (2, 5) starting at row 2
  EXPECT_EQ(rows.offset(), 10);
  EXPECT_TRUE(rows.is_contiguous());
  // Offsets of chained narrows add up; slice(d, a, b) is narrow(d, a, b - a).
  Tensor both = rows.narrow(-1, 2, 2);  // t[2:4, 2:4]
  EXPECT_EQ(both.offset(), 12);
  EXPECT_EQ(both.to_vector_f64(), (std::vector<double>{12, 13, 17, 18}));
  EXPECT_EQ(t.slice(1, 2, 5).to_vector_f64(), t.narrow(1, 2, 3).to_vector_f64());
  EXPECT_EQ(t.slice(1, 2, 5).offset(), 2);
  // Writes through the view land in the base.
  poke(both, {1, 0}, -1.0f);
  EXPECT_EQ(at(t, {3, 2}), -1.0);
  EXPECT_EQ(t.narrow(0, 4, 0).numel(), 0);
  EXPECT_TRUE(throws_error([&] { t.narrow(1, 3, 3); }, "narrow", {"[3, 6)", "size 5", "(4, 5)"}));
  EXPECT_TRUE(throws_error([&] { t.narrow(0, -1, 2); }, "narrow", {"[-1, 1)"}));
  EXPECT_TRUE(throws_error([&] { t.slice(0, 3, 2); }, "narrow", {}));
}

// ---- expand ------------------------------------------------------------------------------

TEST(Views, ExpandUsesStrideZero) {
  Tensor t = iota({3, 1});         // (3, 1)
  Tensor e = t.expand({2, 3, 4});  // (2, 3, 4)
  EXPECT_TRUE(shares_storage(t, e));
  EXPECT_EQ(e.shape(), (Shape{2, 3, 4}));
  EXPECT_EQ(e.strides(), (Strides{0, 1, 0}));
  EXPECT_FALSE(e.is_contiguous());
  for (int64_t a = 0; a < 2; ++a)
    for (int64_t b = 0; b < 3; ++b)
      for (int64_t c = 0; c < 4; ++c) EXPECT_EQ(at(e, {a, b, c}), b);
  EXPECT_EQ(t.expand({-1, 4}).shape(), (Shape{3, 4}));
  EXPECT_EQ(t.expand({3, 1}).strides(), t.strides());
  // A write to the single stored element is seen at every expanded position.
  poke(t, {1, 0}, 9.0f);
  EXPECT_EQ(at(e, {1, 1, 3}), 9.0);
  EXPECT_TRUE(throws_error([&] { t.expand({4, 4}); }, "expand", {"(3, 1)", "(4, 4)", "size 3"}));
  EXPECT_TRUE(throws_error([&] { t.expand({3}); }, "expand", {"fewer"}));
  EXPECT_TRUE(throws_error([&] { t.expand({-1, 3, 4}); }, "expand", {"leading"}));
}

// ---- squeeze / unsqueeze / flatten -------------------------------------------------------

TEST(Views, SqueezeUnsqueeze) {
  Tensor t = iota({2, 1, 3});  // strides (3, 3, 1)
  Tensor s = t.squeeze(1);
  EXPECT_EQ(s.shape(), (Shape{2, 3}));
  EXPECT_EQ(s.strides(), (Strides{3, 1}));
  EXPECT_TRUE(shares_storage(t, s));
  EXPECT_EQ(t.squeeze(-2).shape(), (Shape{2, 3}));
  EXPECT_TRUE(t.squeeze(0).same(t));  // size 2: nothing to squeeze
  EXPECT_EQ(t.unsqueeze(0).shape(), (Shape{1, 2, 1, 3}));
  EXPECT_EQ(t.unsqueeze(-1).shape(), (Shape{2, 1, 3, 1}));
  EXPECT_EQ(t.unsqueeze(-4).shape(), (Shape{1, 2, 1, 3}));
  EXPECT_EQ(t.unsqueeze(3).shape(), (Shape{2, 1, 3, 1}));
  // As torch.unsqueeze: the new dimension's stride is size·stride of the one it precedes,
  // or 1 at the end, so the strides stay those of a dense tensor.
  EXPECT_EQ(t.unsqueeze(0).strides(), (Strides{6, 3, 3, 1}));
  EXPECT_EQ(t.unsqueeze(2).strides(), (Strides{3, 3, 3, 1}));
  EXPECT_EQ(t.unsqueeze(-1).strides(), (Strides{3, 3, 1, 1}));
  EXPECT_EQ(t.transpose(0, 2).unsqueeze(1).strides(), (Strides{1, 3, 3, 3}));  // (3, 1, 1, 2)
  Tensor u = s.unsqueeze(1);  // (2, 1, 3): still dense
  EXPECT_TRUE(u.is_contiguous());
  EXPECT_EQ(u.to_vector_f64(), t.to_vector_f64());
  // Unsqueezing a transposed view keeps its element order.
  Tensor tt = s.transpose(0, 1).unsqueeze(-2);  // (3, 1, 2)
  EXPECT_EQ(tt.to_vector_f64(), (std::vector<double>{0, 3, 1, 4, 2, 5}));
  EXPECT_TRUE(throws_error([&] { t.unsqueeze(4); }, "unsqueeze", {"dimension 4"}));
  EXPECT_TRUE(throws_error([&] { t.unsqueeze(-5); }, "unsqueeze", {"dimension -5"}));
  EXPECT_TRUE(throws_error([&] { t.squeeze(3); }, "squeeze", {"dimension 3"}));
}

TEST(Views, Flatten) {
  Tensor t = iota({2, 3, 4});
  EXPECT_EQ(t.flatten().shape(), (Shape{24}));
  EXPECT_EQ(t.flatten(1).shape(), (Shape{2, 12}));
  EXPECT_EQ(t.flatten(0, 1).shape(), (Shape{6, 4}));
  EXPECT_EQ(t.flatten(-2, -1).shape(), (Shape{2, 12}));
  EXPECT_EQ(t.flatten(1, 1).shape(), (Shape{2, 3, 4}));
  EXPECT_TRUE(shares_storage(t, t.flatten()));
  EXPECT_EQ(Tensor::scalar(7.0).flatten().shape(), (Shape{1}));
  // Flattening a permuted view copies and lists the view's elements in its own order.
  Tensor p = t.permute({2, 0, 1}).flatten(1);  // (4, 6): p[k][3i + j] = t[i][j][k]
  for (int64_t k = 0; k < 4; ++k)
    for (int64_t i = 0; i < 2; ++i)
      for (int64_t j = 0; j < 3; ++j) EXPECT_EQ(at(p, {k, 3 * i + j}), i * 12 + j * 4 + k);
  EXPECT_TRUE(throws_error([&] { t.flatten(2, 1); }, "flatten", {"start_dim 2", "end_dim 1"}));
}

// ---- contiguous / clone / to -------------------------------------------------------------

TEST(Views, ContiguousCopiesOnlyWhenNeeded) {
  Tensor t = iota({3, 4});
  EXPECT_TRUE(t.contiguous().same(t));
  Tensor rows = t.narrow(0, 1, 2);  // dense rows with an offset
  EXPECT_TRUE(rows.contiguous().same(rows));
  Tensor tt = t.transpose(0, 1);  // (4, 3)
  Tensor c = tt.contiguous();
  EXPECT_FALSE(c.same(tt));
  EXPECT_FALSE(shares_storage(c, t));
  EXPECT_TRUE(c.is_contiguous());
  EXPECT_EQ(c.strides(), (Strides{3, 1}));
  EXPECT_EQ(c.offset(), 0);
  for (int64_t i = 0; i < 4; ++i)
    for (int64_t j = 0; j < 3; ++j) EXPECT_EQ(c.data<float>()[i * 3 + j], j * 4 + i);
}

TEST(Views, CloneNeverSharesStorage) {
  Tensor t = iota({2, 3});
  Tensor c = t.clone();
  EXPECT_FALSE(shares_storage(t, c));
  EXPECT_EQ(c.to_vector_f64(), t.to_vector_f64());
  poke(c, {0, 0}, 100.0f);
  EXPECT_EQ(at(t, {0, 0}), 0.0);
  // Cloning an expanded view materialises every element.
  Tensor e = iota({3}).expand({2, 3}).clone();
  EXPECT_EQ(e.strides(), (Strides{3, 1}));
  EXPECT_EQ(e.to_vector_f64(), (std::vector<double>{0, 1, 2, 0, 1, 2}));
}

TEST(Views, ToIsNoOpWhenNothingChanges) {
  Tensor t = iota({2, 3});
  EXPECT_TRUE(t.to(DType::F32).same(t));
  EXPECT_TRUE(t.to(Device::cpu()).same(t));
  Tensor d = t.to(DType::F64);
  EXPECT_FALSE(shares_storage(d, t));
  EXPECT_EQ(d.dtype(), DType::F64);
  EXPECT_EQ(d.to_vector_f64(), t.to_vector_f64());
}

TEST(Views, IsContiguousOnLayouts) {
  Tensor t = iota({2, 3, 4});
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_TRUE(Tensor::scalar(1.0).is_contiguous());
  EXPECT_FALSE(t.transpose(1, 2).is_contiguous());
  EXPECT_TRUE(t.narrow(0, 1, 1).is_contiguous());
  EXPECT_FALSE(t.narrow(2, 0, 2).is_contiguous());
  EXPECT_FALSE(t.narrow(1, 0, 2).is_contiguous());
  // (2, 1, 1) with strides (12, 4, 1): the two elements are 12 apart, not adjacent.
  EXPECT_FALSE(t.narrow(2, 1, 1).narrow(1, 2, 1).is_contiguous());
  EXPECT_TRUE(t.narrow(0, 1, 1).narrow(2, 1, 1).narrow(1, 2, 1).is_contiguous());  // one element
  EXPECT_FALSE(iota({3, 1}).expand({3, 2}).is_contiguous());
  // The stride of a size-1 dimension does not matter.
  Tensor odd = Tensor::from_storage(t.storage(), {2, 1, 3}, {3, 99, 1}, 0, DType::F32);
  EXPECT_TRUE(odd.is_contiguous());
  EXPECT_TRUE(iota({1, 5}).transpose(0, 1).is_contiguous());  // (5, 1) strides (1, 5)
  EXPECT_FALSE(iota({2, 5}).transpose(0, 1).is_contiguous());
}

// Regression: a fresh tensor with a zero-size dimension after the first, e.g. a KV cache
// (B, H, 0, D) before the first token, reported is_contiguous() == false (its dense
// strides put 1 where a 0-size dimension sits), so contiguous() copied it every time.
TEST(Views, EmptyTensorsAreContiguous) {
  for (const Shape& shape : {Shape{3, 0}, Shape{0, 3}, Shape{2, 0, 4}, Shape{1, 2, 0, 8}}) {
    Tensor t = Tensor::empty(shape);
    EXPECT_TRUE(t.is_contiguous()) << shape_str(shape);
    EXPECT_TRUE(t.contiguous().same(t)) << shape_str(shape);
    EXPECT_EQ(t.reshape({-1, 4}).numel(), 0) << shape_str(shape);
  }
  Tensor cut = iota({2, 5}).narrow(1, 2, 0);  // (2, 0) strides (5, 1)
  EXPECT_TRUE(cut.is_contiguous());
}

// ---- copy_from ---------------------------------------------------------------------------

TEST(Views, CopyFromBetweenStridedLayouts) {
  Tensor base = Tensor::zeros({3, 4});
  Tensor dst = base.transpose(0, 1);          // (4, 3) strides (1, 4)
  Tensor src = iota({4, 5}).narrow(1, 1, 3);  // (4, 3) strides (5, 1), offset 1
  dst.copy_from(src);
  // base[j][i] = dst[i][j] = src[i][j] = 5i + 1 + j
  for (int64_t j = 0; j < 3; ++j)
    for (int64_t i = 0; i < 4; ++i) EXPECT_EQ(at(base, {j, i}), 5 * i + 1 + j);
  // A stride-0 source into a narrowed destination, converting F64 → F32.
  Tensor target = Tensor::full({3, 4}, -1.0);
  Tensor row = Tensor::from_vector(std::vector<double>{0.5, 1.5}, {1, 2}, DType::F64);
  target.narrow(1, 1, 2).copy_from(row.expand({3, 2}));
  EXPECT_EQ(target.to_vector_f64(),
            (std::vector<double>{-1, 0.5, 1.5, -1, -1, 0.5, 1.5, -1, -1, 0.5, 1.5, -1}));
  // Same dtype, both dense but offset: the memcpy path must honour the offsets.
  Tensor a = iota({4, 3});
  a.narrow(0, 2, 2).copy_from(a.narrow(0, 0, 2).clone());
  EXPECT_EQ(a.to_vector_f64(), (std::vector<double>{0, 1, 2, 3, 4, 5, 0, 1, 2, 3, 4, 5}));
}

// ---- from_storage ------------------------------------------------------------------------

TEST(Views, FromStorageBoundsChecks) {
  auto storage = Storage::allocate(12 * sizeof(float), Device::cpu());  // 12 floats
  Tensor whole = Tensor::from_storage(storage, {3, 4}, {4, 1}, 0, DType::F32);
  whole.copy_from(iota({3, 4}));
  Tensor cols = Tensor::from_storage(storage, {4, 3}, {1, 4}, 0, DType::F32);  // the transpose
  EXPECT_EQ(at(cols, {3, 2}), 11.0);
  Tensor tail = Tensor::from_storage(storage, {2}, {1}, 10, DType::F32);  // last two floats
  EXPECT_EQ(tail.to_vector_f64(), (std::vector<double>{10, 11}));
  Tensor bcast = Tensor::from_storage(storage, {5, 2}, {0, 1}, 10, DType::F32);
  EXPECT_EQ(bcast.numel(), 10);
  EXPECT_NO_THROW(Tensor::from_storage(storage, {6}, {1}, 0, DType::F64));  // 48 bytes exactly
  EXPECT_NO_THROW(Tensor::from_storage(storage, {0, 4}, {4, 1}, 12, DType::F32));  // empty
  EXPECT_TRUE(throws_error(
      [&] {
        Tensor::from_storage(storage, {3, 4}, {4, 1}, 1, DType::F32);
      },
      "Tensor::from_storage", {"(3, 4)", "offset 1", "48-byte"}));
  EXPECT_TRUE(throws_error(
      [&] {
        Tensor::from_storage(storage, {4, 3}, {1, 5}, 0, DType::F32);
      },
      "Tensor::from_storage", {"(1, 5)"}));
  EXPECT_TRUE(throws_error([&] { Tensor::from_storage(storage, {7}, {1}, 0, DType::F64); },
                           "Tensor::from_storage", {"f64"}));
  EXPECT_TRUE(throws_error([&] { Tensor::from_storage(storage, {2}, {1}, -1, DType::F32); },
                           "Tensor::from_storage", {"offset -1"}));
  EXPECT_TRUE(throws_error(
      [&] {
        Tensor::from_storage(storage, {2, 2}, {1}, 0, DType::F32);
      },
      "Tensor::from_storage", {"rank"}));
  EXPECT_TRUE(throws_error([&] { Tensor::from_storage(storage, {2}, {-1}, 1, DType::F32); },
                           "Tensor::from_storage", {"negative"}));
}

TEST(Views, WrappedStorageReleasedWithLastView) {
  std::vector<float> host{1, 2, 3, 4};
  int released = 0;
  {
    auto storage = Storage::wrap(host.data(), host.size() * sizeof(float), Device::cpu(),
                                 [&](void* p) { released += p == host.data() ? 1 : 100; });
    Tensor t = Tensor::from_storage(storage, {2, 2}, {2, 1}, 0, DType::F32);
    storage.reset();
    Tensor v = t.transpose(0, 1);
    EXPECT_EQ(v.to_vector_f64(), (std::vector<double>{1, 3, 2, 4}));
    t = Tensor();
    EXPECT_EQ(released, 0);  // v still holds the storage
  }
  EXPECT_EQ(released, 1);
}

// ---- autograd through views --------------------------------------------------------------

namespace {

Tensor leaf(const Shape& shape) {
  Tensor t = iota(shape, DType::F64);
  t.set_requires_grad(true);
  return t;
}

// Weights w[i] = 1 + i / 8 (distinct, exact in F64), so each output element's gradient is
// recognisable.
Tensor weights(const Shape& shape) {
  std::vector<double> w(static_cast<size_t>(shape_numel(shape)));
  for (size_t i = 0; i < w.size(); ++i) w[i] = 1.0 + static_cast<double>(i) / 8.0;
  return Tensor::from_vector(w, shape, DType::F64);
}

// backward of Σ view ⊙ W; returns the leaf's gradient.
std::vector<double> grad_of_weighted_sum(const Tensor& x, const Tensor& view) {
  ops::sum_all(ops::mul(view, weights(view.shape()))).backward();
  EXPECT_TRUE(x.grad().defined());
  EXPECT_EQ(x.grad().shape(), x.shape());
  return x.grad().to_vector_f64();
}

double w_at(int64_t linear) { return 1.0 + static_cast<double>(linear) / 8.0; }

}  // namespace

TEST(Views, GradThroughTranspose) {
  Tensor x = leaf({2, 3});
  std::vector<double> g = grad_of_weighted_sum(x, x.transpose(0, 1));  // view (3, 2)
  // y[j][i] = x[i][j]  ⇒  dx[i][j] = W[j][i] = w(2j + i)
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 3; ++j) EXPECT_EQ(g[i * 3 + j], w_at(2 * j + i)) << i << "," << j;
}

TEST(Views, GradThroughNarrow) {
  Tensor x = leaf({4, 3});
  std::vector<double> g = grad_of_weighted_sum(x, x.narrow(0, 1, 2));  // rows 1 and 2
  for (int64_t i = 0; i < 4; ++i)
    for (int64_t j = 0; j < 3; ++j)
      EXPECT_EQ(g[i * 3 + j], (i == 1 || i == 2) ? w_at((i - 1) * 3 + j) : 0.0) << i << "," << j;
}

TEST(Views, GradThroughExpand) {
  Tensor x = leaf({3, 1});
  std::vector<double> g = grad_of_weighted_sum(x, x.expand({2, 3, 4}));
  // y[a][b][c] = x[b]  ⇒  dx[b] = Σ_{a,c} W[a][b][c]
  for (int64_t b = 0; b < 3; ++b) {
    double expected = 0.0;
    for (int64_t a = 0; a < 2; ++a)
      for (int64_t c = 0; c < 4; ++c) expected += w_at(a * 12 + b * 4 + c);
    EXPECT_EQ(g[b], expected) << b;
  }
}

TEST(Views, GradThroughCopyingReshape) {
  Tensor x = leaf({2, 3});
  // y = [x00, x10, x01, x11, x02, x12]: y[2j + i] = x[i][j]
  std::vector<double> g = grad_of_weighted_sum(x, x.transpose(0, 1).reshape({6}));
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 3; ++j) EXPECT_EQ(g[i * 3 + j], w_at(2 * j + i));
}

TEST(Views, GradThroughPermuteSqueezeUnsqueezeFlatten) {
  Tensor x = leaf({2, 1, 3});
  // y (3, 2) with y[j][i] = x[i][0][j], then (6,) row-major: y[2j + i].
  Tensor y = x.squeeze(1).unsqueeze(0).permute({2, 0, 1}).flatten();
  EXPECT_EQ(y.shape(), (Shape{6}));
  std::vector<double> g = grad_of_weighted_sum(x, y);
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 3; ++j) EXPECT_EQ(g[i * 3 + j], w_at(2 * j + i));
}

TEST(Views, GradAccumulatesOverOverlappingViews) {
  Tensor x = leaf({2, 3});
  Tensor loss = ops::add(ops::sum_all(x.narrow(1, 0, 2)), ops::sum_all(x.slice(1, 1, 3)));
  loss.backward();
  // Column 1 is in both views.
  EXPECT_EQ(x.grad().to_vector_f64(), (std::vector<double>{1, 2, 1, 1, 2, 1}));
}

TEST(Views, GradThroughCastAndClone) {
  Tensor x = leaf({3});
  Tensor y = x.to(DType::F32).clone();  // F64 → F32 → copy
  EXPECT_EQ(y.dtype(), DType::F32);
  ops::sum_all(ops::mul(y, Tensor::from_vector(std::vector<float>{2, 3, 4}, {3}))).backward();
  EXPECT_EQ(x.grad().dtype(), DType::F64);
  EXPECT_EQ(x.grad().to_vector_f64(), (std::vector<double>{2, 3, 4}));
}

TEST(Views, NoGraphUnderNoGradGuard) {
  Tensor x = leaf({2, 3});
  {
    autograd::NoGradGuard no_grad;
    Tensor v = x.transpose(0, 1);
    EXPECT_FALSE(v.requires_grad());
    EXPECT_EQ(v.grad_fn(), nullptr);
  }
  Tensor v = x.transpose(0, 1);
  EXPECT_TRUE(v.requires_grad());
  ASSERT_NE(v.grad_fn(), nullptr);
  EXPECT_EQ(v.grad_fn()->name(), "permute");
  EXPECT_FALSE(x.detach().requires_grad());
  EXPECT_TRUE(shares_storage(x.detach(), x));
}
