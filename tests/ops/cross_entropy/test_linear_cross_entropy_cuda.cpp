// CUDA vs CPU for linear_cross_entropy (the chunked LM head + loss) and lm_head_cross_entropy
// (the logits' gradient written in the forward), forward and backward (loss, hidden and
// weight gradients): F32 at SPEC §6 tolerances, BF16 by relative L2 error, with ignored rows,
// chunks that do and do not divide the rows, and real vocabularies.
#include <gtest/gtest.h>

#include <vector>

#include "cuda/cuda_test_utils.h"
#include "microllm/core/random.h"
#include "microllm/ops/ops.h"

using namespace microllm;
using microllm::testing::cuda_matches_cpu;

TEST(CudaLinearCrossEntropy, MatchesTheCpu) {
  MICROLLM_REQUIRE_CUDA();
  const std::vector<std::tuple<int64_t, int64_t, int64_t, int64_t>> cases = {
      {7, 16, 33, 3}, {64, 64, 1000, 16}, {40, 128, 151936, 32}};  // N, C, V, chunk
  for (DType dtype : microllm::testing::kCudaTestDtypes)
    for (const auto& [N, C, V, chunk] : cases) {
      Generator gen(70);
      std::vector<int64_t> ids = randint({N}, 0, V, gen).to_vector_i64();
      for (int64_t i = 1; i < N; i += 3) ids[static_cast<size_t>(i)] = -100;
      const Tensor targets = Tensor::from_vector(ids, {N}, DType::I64);
      const Tensor hidden = microllm::testing::cuda_test_leaf({N, C}, 71, 0.0, 1.0);
      const Tensor weight = microllm::testing::cuda_test_leaf({V, C}, 72, 0.0, 0.2);
      const int64_t rows = chunk;
      EXPECT_TRUE(cuda_matches_cpu(
          [&](const auto& v) {
            return ops::linear_cross_entropy(v[0], v[1], v[2], -100, DType::F32, rows);
          },
          {hidden, weight, targets}, microllm::testing::options_in(dtype)))
          << dtype << " N " << N << " C " << C << " V " << V << " chunk " << chunk;
    }
}

// Vocabularies for each form of the fused kernel: rows not in 16-byte vectors (the two
// kernels), a cluster of one block, real vocabularies in clusters of 2 to 8 blocks, and a row
// too long for 8 blocks in F32 (the two kernels again).
TEST(CudaLmHeadCrossEntropy, MatchesTheCpu) {
  MICROLLM_REQUIRE_CUDA();
  const std::vector<std::tuple<int64_t, int64_t, int64_t>> cases = {
      {7, 16, 33}, {64, 64, 1000}, {24, 64, 128256}, {40, 128, 151936}, {9, 32, 200000}};
  for (DType dtype : microllm::testing::kCudaTestDtypes)
    for (const auto& [N, C, V] : cases) {
      Generator gen(73);
      std::vector<int64_t> ids = randint({N}, 0, V, gen).to_vector_i64();
      for (int64_t i = 1; i < N; i += 3) ids[static_cast<size_t>(i)] = -100;
      ids.back() = V - 1;  // the last element of a row, in the last block of its cluster
      const Tensor targets = Tensor::from_vector(ids, {N}, DType::I64);
      const Tensor hidden = microllm::testing::cuda_test_leaf({N, C}, 74, 0.0, 1.0);
      const Tensor weight = microllm::testing::cuda_test_leaf({V, C}, 75, 0.0, 0.2);
      EXPECT_TRUE(cuda_matches_cpu(
          [&](const auto& v) {
            return ops::lm_head_cross_entropy(v[0], v[1], v[2], -100, DType::F32);
          },
          {hidden, weight, targets}, microllm::testing::options_in(dtype)))
          << dtype << " N " << N << " C " << C << " V " << V;
    }
}
