// The CUDA copy's plan (src/cuda/copy_plan.h) run on the host: for strided layouts of every
// element size, walking the plan's merged dims and words over host memory gives the same
// bytes as Tensor::copy_from on the CPU; rows contiguous on both sides merge, and the
// attention transposes move 16-byte words.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <vector>

#include "cuda/copy_plan.h"
#include "microllm/core/tensor.h"

using namespace microllm;
using microllm::cuda::CopyPlan;
using microllm::cuda::plan_copy;

namespace {

// A dense tensor whose element at row-major linear index i holds i (mod the dtype's range).
Tensor iota(const Shape& shape, DType dtype) {
  std::vector<double> values(static_cast<size_t>(shape_numel(shape)));
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<double>(i % 251);
  return Tensor::from_vector(values, shape, dtype);
}

CopyPlan plan_of(const Tensor& dst, const Tensor& src) {
  return plan_copy(
      dst.shape(), dst.strides(), src.strides(), static_cast<int>(dtype_size(dst.dtype())),
      reinterpret_cast<uintptr_t>(dst.raw_data()), reinterpret_cast<uintptr_t>(src.raw_data()));
}

// dst = src the way the CUDA kernel walks the plan: word i's offsets from its index over the
// merged sizes, word_bytes bytes at a time.
void copy_by_plan(const Tensor& dst, const Tensor& src) {
  const CopyPlan plan = plan_of(dst, src);
  auto* d = static_cast<unsigned char*>(dst.raw_data());
  const auto* s = static_cast<const unsigned char*>(src.raw_data());
  for (int64_t i = 0; i < plan.words; ++i) {
    int64_t rest = i, dst_at = 0, src_at = 0;
    for (int dim = plan.rank - 1; dim >= 0; --dim) {
      const int64_t at = rest % plan.sizes[dim];
      rest /= plan.sizes[dim];
      dst_at += at * plan.dst_strides[dim];
      src_at += at * plan.src_strides[dim];
    }
    std::memcpy(d + dst_at * plan.word_bytes, s + src_at * plan.word_bytes,
                static_cast<size_t>(plan.word_bytes));
  }
}

std::vector<unsigned char> bytes_of(const Tensor& dense) {
  const auto* p = static_cast<const unsigned char*>(dense.raw_data());
  return {p, p + dense.nbytes()};
}

// Copies src into a fresh view made by make_dst (of a zeroed buffer) both ways and compares
// the whole buffers, so bytes outside the view are checked too.
void expect_plan_copies_like_the_cpu(const Tensor& src,
                                     const std::function<Tensor(const Tensor&)>& make_dst,
                                     const Shape& buffer_shape) {
  const Tensor by_cpu = Tensor::zeros(buffer_shape, src.dtype());
  const Tensor by_plan = Tensor::zeros(buffer_shape, src.dtype());
  make_dst(by_cpu).copy_from(src);
  copy_by_plan(make_dst(by_plan), src);
  EXPECT_EQ(bytes_of(by_plan), bytes_of(by_cpu)) << src.describe();
}

}  // namespace

TEST(CopyPlan, WalksStridedLayoutsLikeTheCpuCopy) {
  const auto dense = [](const Tensor& t) { return t; };
  for (DType dtype : {DType::U8, DType::BF16, DType::F32, DType::F64}) {
    for (int64_t D : {64, 63, 8, 2}) {
      SCOPED_TRACE(::testing::Message() << dtype << " D " << D);
      // (B, T, H, D) → (B, H, T, D) and back: the attention transposes.
      const Tensor bthd = iota({2, 5, 3, D}, dtype);
      expect_plan_copies_like_the_cpu(bthd.transpose(1, 2), dense, {2, 3, 5, D});
      const Tensor bhtd = iota({2, 3, 5, D}, dtype);
      expect_plan_copies_like_the_cpu(bhtd.transpose(1, 2), [](const Tensor& t) { return t; },
                                      {2, 5, 3, D});
      // Into a transposed destination.
      expect_plan_copies_like_the_cpu(bhtd, [](const Tensor& t) { return t.transpose(1, 2); },
                                      {2, 5, 3, D});
      // Narrowed rows at an odd element offset, and a narrowed innermost dim.
      const Tensor wide = iota({4, 7, D + 3}, dtype);
      expect_plan_copies_like_the_cpu(wide.narrow(2, 1, D), dense, {4, 7, D});
      expect_plan_copies_like_the_cpu(wide.narrow(1, 2, 3), dense, {4, 3, D + 3});
      expect_plan_copies_like_the_cpu(iota({4, 3, D}, dtype),
                                      [D](const Tensor& t) { return t.narrow(2, 3, D); },
                                      {4, 3, D + 5});
      // A broadcast source (stride 0) and a full permutation.
      expect_plan_copies_like_the_cpu(iota({1, 1, D}, dtype).expand({3, 4, D}), dense, {3, 4, D});
      expect_plan_copies_like_the_cpu(iota({3, 4, D}, dtype).permute({2, 0, 1}), dense, {D, 3, 4});
    }
  }
  // One element, and size-1 dims between others.
  expect_plan_copies_like_the_cpu(iota({1, 1}, DType::F32), [](const Tensor& t) { return t; },
                                  {1, 1});
  expect_plan_copies_like_the_cpu(iota({3, 1, 4, 1}, DType::BF16).transpose(0, 2),
                                  [](const Tensor& t) { return t; }, {4, 1, 3, 1});
}

TEST(CopyPlan, MergesDimsAndMovesSixteenByteWords) {
  // (B, T, H, D) = (2, 5, 3, 64) BF16 viewed as (B, H, T, D), copied dense: no two dims merge
  // (the source's B stride T·H·D is not 3 times its H stride D), and each D row of 128 bytes
  // is eight 16-byte words; strides in words: source (T·H·D, D, H·D, 1) / 8.
  const Tensor src = iota({2, 5, 3, 64}, DType::BF16).transpose(1, 2);
  const CopyPlan plan = plan_of(Tensor::empty({2, 3, 5, 64}, DType::BF16), src);
  EXPECT_EQ(plan.rank, 4);
  EXPECT_EQ(plan.word_bytes, 16);
  EXPECT_EQ(plan.sizes, (std::vector<int64_t>{2, 3, 5, 8}));
  EXPECT_EQ(plan.dst_strides, (std::vector<int64_t>{120, 40, 8, 1}));
  EXPECT_EQ(plan.src_strides, (std::vector<int64_t>{120, 8, 24, 1}));
  EXPECT_EQ(plan.words, 2 * 3 * 5 * 8);
  // Rows 2..4 of each (7, 64) BF16 matrix: the 3 rows are contiguous on both sides, so they
  // merge into one dim of 192 elements = 24 words; the outer dim's source stride is 7·64.
  const Tensor rows = iota({4, 7, 64}, DType::BF16).narrow(1, 2, 3);
  const CopyPlan merged = plan_of(Tensor::empty({4, 3, 64}, DType::BF16), rows);
  EXPECT_EQ(merged.rank, 2);
  EXPECT_EQ(merged.word_bytes, 16);
  EXPECT_EQ(merged.sizes, (std::vector<int64_t>{4, 24}));
  EXPECT_EQ(merged.dst_strides, (std::vector<int64_t>{24, 1}));
  EXPECT_EQ(merged.src_strides, (std::vector<int64_t>{56, 1}));
  // An innermost dim that is not contiguous on both sides keeps element words.
  const Tensor by_columns = iota({64, 6}, DType::BF16).transpose(0, 1);
  EXPECT_EQ(plan_of(Tensor::empty({6, 64}, DType::BF16), by_columns).word_bytes, 2);
  // Odd row lengths keep element words too.
  const Tensor odd = iota({2, 5, 3, 63}, DType::BF16).transpose(1, 2);
  EXPECT_EQ(plan_of(Tensor::empty({2, 3, 5, 63}, DType::BF16), odd).word_bytes, 2);
}
