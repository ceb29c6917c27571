// CUDA vs CPU for cross_entropy, forward and backward: F32 at SPEC §6 tolerances, BF16 by
// relative L2 error. Covers ignored rows with I32 and I64 targets (also a class id as the
// ignore index), every row ignored (loss 0, zero gradient), a real vocabulary (151,936),
// transposed (non-contiguous) logits, and repeated runs that must be bitwise identical.
#include <gtest/gtest.h>

#include <vector>

#include "cuda/cuda_test_utils.h"
#include "microllm/core/random.h"
#include "microllm/ops/ops.h"

using namespace microllm;
using microllm::testing::cuda_matches_cpu;
using microllm::testing::CudaCheckOptions;

namespace {

constexpr int64_t kVocab = 151936;  // Qwen's vocabulary

Tensor leaf(const Shape& shape, uint64_t seed, double mean = 0.0, double std = 1.0) {
  return microllm::testing::cuda_test_leaf(shape, seed, mean, std);
}

CudaCheckOptions in(DType dtype) { return microllm::testing::options_in(dtype); }

constexpr const DType (&kDtypes)[2] = microllm::testing::kCudaTestDtypes;

// Targets in [0, V) for N rows, every third row (1, 4, 7, …) set to ignore_index.
Tensor make_targets(int64_t N, int64_t V, int64_t ignore_index, DType dtype, uint64_t seed) {
  Generator gen(seed);
  std::vector<int64_t> ids = randint({N}, 0, V, gen).to_vector_i64();
  for (int64_t i = 1; i < N; i += 3) ids[static_cast<size_t>(i)] = ignore_index;
  return Tensor::from_vector(ids, {N}, dtype);
}

}  // namespace

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
