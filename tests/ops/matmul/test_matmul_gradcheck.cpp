// Finite-difference gradient checks (F64, tests/support/gradcheck.h) of matmul in every
// layout (2-D, batched, a 2-D operand shared across a batch, every transpose, non-contiguous
// operand views) and of linear with and without bias.
#include <gtest/gtest.h>

#include "microllm/ops/ops.h"
#include "support/gradcheck.h"

using namespace microllm;
using microllm::testing::gradcheck;
using microllm::testing::random_leaf;

namespace {
// A (M, K) operand stored as read with `trans`: (K, M) when transposed.
Shape stored(int64_t rows, int64_t cols, bool trans, int64_t batch = 0) {
  Shape s = trans ? Shape{cols, rows} : Shape{rows, cols};
  if (batch) s.insert(s.begin(), batch);
  return s;
}
}  // namespace

TEST(GradcheckMatmul, TwoDAllTransposes) {
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      SCOPED_TRACE(std::string("trans_a ") + (ta ? "1" : "0") + " trans_b " + (tb ? "1" : "0"));
      EXPECT_TRUE(gradcheck(
          [=](const std::vector<Tensor>& in) { return ops::matmul(in[0], in[1], ta, tb); },
          {random_leaf(stored(3, 4, ta), 1), random_leaf(stored(4, 2, tb), 2)}));
    }
}

TEST(GradcheckMatmul, BatchedAllTransposes) {
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      SCOPED_TRACE(std::string("trans_a ") + (ta ? "1" : "0") + " trans_b " + (tb ? "1" : "0"));
      EXPECT_TRUE(gradcheck(
          [=](const std::vector<Tensor>& in) { return ops::matmul(in[0], in[1], ta, tb); },
          {random_leaf(stored(3, 4, ta, 2), 3), random_leaf(stored(4, 2, tb, 2), 4)}));
    }
}

TEST(GradcheckMatmul, TwoDSharedWithBatched) {
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      SCOPED_TRACE(std::string("trans_a ") + (ta ? "1" : "0") + " trans_b " + (tb ? "1" : "0"));
      // 2-D a shared across the batch of b, then 3-D a with a shared 2-D b.
      EXPECT_TRUE(gradcheck(
          [=](const std::vector<Tensor>& in) { return ops::matmul(in[0], in[1], ta, tb); },
          {random_leaf(stored(3, 4, ta), 5), random_leaf(stored(4, 2, tb, 2), 6)}));
      EXPECT_TRUE(gradcheck(
          [=](const std::vector<Tensor>& in) { return ops::matmul(in[0], in[1], ta, tb); },
          {random_leaf(stored(3, 4, ta, 2), 7), random_leaf(stored(4, 2, tb), 8)}));
    }
}

TEST(GradcheckMatmul, NonContiguousOperandViews) {
  // a: a transposed (4, 3) → (3, 4); b: columns 1..2 of a (4, 5) → (4, 2).
  EXPECT_TRUE(gradcheck(
      [](const std::vector<Tensor>& in) {
        return ops::matmul(in[0].transpose(0, 1), in[1].narrow(1, 1, 2));
      },
      {random_leaf({4, 3}, 9), random_leaf({4, 5}, 10)}));
  // Batched: a (3, 2, 4) permuted to (2, 3, 4); b (2, 2, 4) read transposed from a transposed view.
  EXPECT_TRUE(gradcheck(
      [](const std::vector<Tensor>& in) {
        return ops::matmul(in[0].permute({1, 0, 2}), in[1].transpose(1, 2), false, true);
      },
      {random_leaf({3, 2, 4}, 11), random_leaf({2, 4, 2}, 12)}));
  // Neither stride is 1: every other column of a (3, 8) reshaped to (3, 4, 2).
  EXPECT_TRUE(gradcheck(
      [](const std::vector<Tensor>& in) {
        return ops::matmul(in[0].reshape({3, 4, 2}).narrow(2, 0, 1).reshape({3, 4}), in[1]);
      },
      {random_leaf({3, 8}, 13), random_leaf({4, 2}, 14)}));
  // A batch expanded from one matrix (batch stride 0).
  EXPECT_TRUE(gradcheck(
      [](const std::vector<Tensor>& in) {
        return ops::matmul(in[0].expand({2, 3, 4}), in[1]);
      },
      {random_leaf({1, 3, 4}, 15), random_leaf({2, 4, 2}, 16)}));
}

TEST(GradcheckMatmul, LinearOnThreeDInput) {
  const Tensor x = random_leaf({2, 3, 4}, 17);    // (B, T, in)
  const Tensor weight = random_leaf({5, 4}, 18);  // (out, in)
  const Tensor bias = random_leaf({5}, 19);       // (out)
  EXPECT_TRUE(
      gradcheck([](const std::vector<Tensor>& in) { return ops::linear(in[0], in[1], in[2]); },
                {x, weight, bias}));
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& in) { return ops::linear(in[0], in[1]); },
                        {x, weight}));
  // Non-contiguous x: (B, in, T) transposed to (B, T, in).
  EXPECT_TRUE(gradcheck(
      [](const std::vector<Tensor>& in) {
        return ops::linear(in[0].transpose(1, 2), in[1], in[2]);
      },
      {random_leaf({2, 4, 3}, 20), weight, bias}));
}
