// CUDA vs CPU for index_select, forward and the input gradient, F32 at SPEC §6 tolerances
// and BF16 by relative L2 error: dims 0, 1 and 2 with repeated indices (I32 and I64), a
// permuted (non-contiguous) source, long indices over few columns, and 16.8M outputs.
#include <gtest/gtest.h>

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

Tensor index_tensor(const std::vector<int64_t>& values, DType dtype) {
  return Tensor::from_vector(values, {static_cast<int64_t>(values.size())}, dtype);
}

CudaCheckOptions in(DType dtype) { return microllm::testing::options_in(dtype); }

constexpr const DType (&kDtypes)[2] = microllm::testing::kCudaTestDtypes;
const DType kIndexDtypes[] = {DType::I32, DType::I64};

}  // namespace

TEST(CudaIndexSelect, DimsZeroOneTwoWithRepeatedIndices) {
  MICROLLM_REQUIRE_CUDA();
  const std::vector<std::vector<int64_t>> indices = {
      {4, 0, 4, 2},        // dim 0 of (5, 6, 7)
      {5, 5, 0, 3, 1, 5},  // dim 1
      {6, 0, 6, 6, 3}};    // dim 2: one-element rows (4-byte F32, 2-byte BF16 copies)
  for (DType dtype : kDtypes)
    for (DType index_dtype : kIndexDtypes)
      for (int64_t dim = 0; dim < 3; ++dim) {
        const Tensor index = index_tensor(indices[dim], index_dtype);
        const auto fn = [dim](const auto& x) { return ops::index_select(x[0], dim, x[1]); };
        EXPECT_TRUE(cuda_matches_cpu(fn, {leaf({5, 6, 7}, 101), index}, in(dtype)))
            << dtype << " index " << index_dtype << " dim " << dim;
        // The same through a permuted (non-contiguous) view: (7, 6, 5) → (5, 6, 7).
        const auto fn_view = [dim](const auto& x) {
          return ops::index_select(x[0].permute({2, 1, 0}), dim, x[1]);
        };
        EXPECT_TRUE(cuda_matches_cpu(fn_view, {leaf({7, 6, 5}, 102), index}, in(dtype)))
            << dtype << " index " << index_dtype << " dim " << dim << " permuted view";
      }
}

TEST(CudaIndexSelect, LongIndicesOverFewColumns) {
  MICROLLM_REQUIRE_CUDA();
  // Few (outer, inner) columns and many indices: the backward splits target rows into
  // classes and walks several tiles of indices.
  Generator gen(111);
  const std::vector<int64_t> short_index = randint({1000}, 0, 3, gen).to_vector_i64();
  const std::vector<int64_t> wide_index = randint({700}, 0, 300, gen).to_vector_i64();
  for (DType dtype : kDtypes)
    for (DType index_dtype : kIndexDtypes) {
      EXPECT_TRUE(cuda_matches_cpu([](const auto& x) { return ops::index_select(x[0], 0, x[1]); },
                                   {leaf({3}, 112), index_tensor(short_index, index_dtype)},
                                   in(dtype)))
          << dtype << " index " << index_dtype << " x (3)";
      EXPECT_TRUE(cuda_matches_cpu([](const auto& x) { return ops::index_select(x[0], 1, x[1]); },
                                   {leaf({2, 300, 3}, 113), index_tensor(wide_index, index_dtype)},
                                   in(dtype)))
          << dtype << " index " << index_dtype << " x (2, 300, 3)";
    }
}

TEST(CudaIndexSelect, SixteenMillionOutputsAlongAMiddleDim) {
  MICROLLM_REQUIRE_CUDA();
  // x (8, 1000, 1024) → (8, 2048, 1024) = 16.8M outputs; 16-byte copies in both dtypes.
  Generator gen(121);
  const Tensor index = randint({2048}, 0, 1000, gen, DType::I32);
  const Tensor x = leaf({8, 1000, 1024}, 122);
  for (DType dtype : kDtypes) {
    CudaCheckOptions o = in(dtype);
    o.check_backward = dtype == DType::F32;
    EXPECT_TRUE(cuda_matches_cpu([](const auto& v) { return ops::index_select(v[0], 1, v[1]); },
                                 {x, index}, o))
        << dtype;
  }
}
