// CUDA vs CPU for embedding, forward and the weight gradient, F32 at SPEC §6 tolerances
// and BF16 by relative L2 error: repeated ids (I32 and I64) with 16-byte and narrower row
// copies, Qwen's 151,936-entry vocabulary, and 16.8M outputs with many repeats.
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

TEST(CudaEmbedding, RepeatedIdsInt32AndInt64) {
  MICROLLM_REQUIRE_CUDA();
  // Ids (3, 5) with repeats, the first and the last row. C = 24 takes 16-byte copies in
  // F32 and BF16; C = 7 takes 4-byte (F32) and 2-byte (BF16) copies.
  const std::vector<int64_t> id_values = {3, 0, 49, 3, 3, 17, 0, 49, 22, 3, 8, 17, 17, 1, 3};
  for (int64_t C : {24, 7})
    for (DType dtype : kDtypes)
      for (DType id_dtype : kIndexDtypes) {
        const Tensor weight = leaf({50, C}, 71);
        const Tensor ids = Tensor::from_vector(id_values, {3, 5}, id_dtype);
        EXPECT_TRUE(cuda_matches_cpu([](const auto& x) { return ops::embedding(x[0], x[1]); },
                                     {weight, ids}, in(dtype)))
            << dtype << " ids " << id_dtype << " C " << C;
      }
}

TEST(CudaEmbedding, QwenVocabularyWithSmallWidth) {
  MICROLLM_REQUIRE_CUDA();
  const int64_t V = 151936, C = 8;
  Generator gen(81);
  std::vector<int64_t> id_values = randint({257}, 0, V, gen).to_vector_i64();
  for (int64_t id : {int64_t{0}, V - 1, V - 1, int64_t{151643}, int64_t{0}, int64_t{151643}})
    id_values.push_back(id);
  for (DType dtype : kDtypes)
    for (DType id_dtype : kIndexDtypes) {
      const Tensor weight = leaf({V, C}, 82);
      const Tensor ids = index_tensor(id_values, id_dtype);
      EXPECT_TRUE(cuda_matches_cpu([](const auto& x) { return ops::embedding(x[0], x[1]); },
                                   {weight, ids}, in(dtype)))
          << dtype << " ids " << id_dtype;
    }
}

TEST(CudaEmbedding, SixteenMillionOutputsWithManyRepeats) {
  MICROLLM_REQUIRE_CUDA();
  // (N = 16384 tokens, C = 1024) = 16.8M outputs; 4096 ids, so each id repeats about 4 times
  // and the backward runs 64 tiles of ids through every class of rows.
  const int64_t V = 4096, C = 1024, N = 16384;
  Generator gen(91);
  const Tensor ids = randint({4, N / 4}, 0, V, gen, DType::I64);
  const Tensor weight = leaf({V, C}, 92);
  EXPECT_TRUE(
      cuda_matches_cpu([](const auto& x) { return ops::embedding(x[0], x[1]); }, {weight, ids}));
}
