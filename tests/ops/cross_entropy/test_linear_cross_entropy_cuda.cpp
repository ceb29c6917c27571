// CUDA vs CPU for linear_cross_entropy (the chunked LM head + loss) and lm_head_cross_entropy
// (the logits' gradient written in the forward), forward and backward (loss, hidden and
// weight gradients): F32 at SPEC §6 tolerances, BF16 by relative L2 error, with ignored rows,
// chunks that do and do not divide the rows, and real vocabularies.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "cuda/cuda_test_utils.h"
#include "microllm/core/random.h"
#include "microllm/ops/ops.h"
#include "ops/cross_entropy/cross_entropy_kernels.h"

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

// The fused kernel entry alone on rows whose exponentials are out of the ordinary: a large
// common offset (the max subtracted before exponentiating), a vocabulary masked to −inf but
// for a few classes, an ignored masked row, the max in the cluster's last block, and rows far
// below 0. lse, the loss and the gradient against the CPU kernel (F32 at the CUDA tolerance,
// BF16 in place, as the trainer runs it, by relative L2 per row).
TEST(CudaLmHeadCrossEntropy, KernelMatchesTheCpuOnExtremeRows) {
  MICROLLM_REQUIRE_CUDA();
  constexpr int64_t N = 6, V = 151936;
  Generator gen(76);
  std::vector<double> values = randn({N, V}, gen).to_vector_f64();  // (N, V) N(0, 1)
  const auto at = [&](int64_t r, int64_t v) -> double& {
    return values[static_cast<size_t>(r * V + v)];
  };
  for (int64_t v = 0; v < V; ++v) {
    at(0, v) *= 2.0;
    at(1, v) += 80.0;
    at(2, v) = v % 5000 == 7 ? at(2, v) : -INFINITY;
    at(3, v) = v % 3 == 0 ? -INFINITY : at(3, v);
    at(5, v) = at(5, v) * 3.0 - 200.0;
  }
  at(4, V - 1) = 30.0;
  const std::vector<int64_t> ids = {5, 77, 5007, -100, V - 1, 12345};  // row 3 ignored
  const int64_t kept = 5;
  const Tensor targets = Tensor::from_vector(ids, {N}, DType::I64);
  const Device cuda = Device::cuda(0);
  for (DType dtype : microllm::testing::kCudaTestDtypes) {
    const Tensor logits = Tensor::from_vector(values, {N, V}, DType::F64).to(dtype);  // (N, V)
    const Tensor exact = logits.to(DType::F32);  // (N, V) the values the device sees
    const Tensor want_lse = Tensor::empty({N}, DType::F32);
    const Tensor want_loss = Tensor::empty({}, DType::F32);
    const Tensor want_grad = Tensor::empty({N, V}, DType::F32);
    ops::cross_entropy_forward_grad_cpu(exact, targets, -100, kept, want_lse, want_loss, want_grad);
    const Tensor x = logits.to(cuda);  // (N, V); BF16: the gradient is written over it
    const Tensor lse = Tensor::empty({N}, DType::F32, cuda);
    const Tensor loss = Tensor::empty({}, DType::F32, cuda);
    const Tensor grad = dtype == DType::BF16 ? x : Tensor::empty({N, V}, dtype, cuda);
    ops::cross_entropy_forward_grad_cuda(x, targets.to(cuda), -100, kept, lse, loss, grad);
    const Tensor got_grad = grad.to(Device::cpu()).to(DType::F32);  // (N, V)
    EXPECT_LE(microllm::testing::tolerance_ratio(lse.to(Device::cpu()), want_lse, 5e-5, 5e-5), 1.0)
        << dtype;
    EXPECT_LE(microllm::testing::tolerance_ratio(loss.to(Device::cpu()), want_loss, 5e-5, 5e-5),
              1.0)
        << dtype;
    for (int64_t r = 0; r < N; ++r) {
      const Tensor g = got_grad.narrow(0, r, 1), w = want_grad.narrow(0, r, 1);  // (1, V)
      if (dtype == DType::F32) {
        EXPECT_LE(microllm::testing::tolerance_ratio(g, w, 5e-5, 5e-5), 1.0) << "row " << r;
        EXPECT_LE(microllm::testing::relative_l2(g, w), 2e-5) << "row " << r;
      } else {
        EXPECT_LE(microllm::testing::relative_l2(g, w), 1e-2) << "row " << r;
      }
    }
  }
}
