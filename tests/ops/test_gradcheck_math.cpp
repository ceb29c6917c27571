// Finite-difference gradient checks (F64, tests/support/gradcheck.h) of the elementwise
// operators (with broadcasting), the reductions, matmul in every layout, and linear.
//
// Inputs are small so the whole suite stays fast in Debug; ops that need positive inputs
// (log, sqrt, rsqrt, the divisor of div, non-integer pow) get uniform samples in [0.5, 2).
#include <gtest/gtest.h>

#include "microllm/ops/ops.h"
#include "ops/op_test_util.h"
#include "support/gradcheck.h"

using namespace microllm;
using microllm::testing::gradcheck;
using microllm::testing::random_leaf;
using microllm::testing::optest::uniform_leaf;

namespace {

using BinaryFn = Tensor (*)(const Tensor&, const Tensor&);

struct BroadcastCase {
  Shape a, b;
};

// Same shape, trailing broadcast, leading broadcast, both sides broadcast, a scalar.
const BroadcastCase kBroadcastCases[] = {
    {{2, 3}, {2, 3}},    {{2, 3, 4}, {3, 1}}, {{4}, {2, 3, 4}},
    {{2, 1, 4}, {3, 1}}, {{}, {2, 3}},        {{2, 3}, {1}},
};

void check_binary(BinaryFn fn, bool positive_b) {
  uint64_t seed = 10;
  for (const BroadcastCase& c : kBroadcastCases) {
    SCOPED_TRACE(shape_str(c.a) + " op " + shape_str(c.b));
    Tensor a = random_leaf(c.a, seed++);
    Tensor b = positive_b ? uniform_leaf(c.b, seed++, 0.5, 2.0) : random_leaf(c.b, seed++);
    EXPECT_TRUE(
        gradcheck([fn](const std::vector<Tensor>& in) { return fn(in[0], in[1]); }, {a, b}));
  }
}

}  // namespace

// ---- elementwise ----------------------------------------------------------------------------

TEST(GradcheckElementwise, Add) { check_binary(ops::add, false); }
TEST(GradcheckElementwise, Sub) { check_binary(ops::sub, false); }
TEST(GradcheckElementwise, Mul) { check_binary(ops::mul, false); }
TEST(GradcheckElementwise, Div) { check_binary(ops::div, true); }

TEST(GradcheckElementwise, BroadcastOnlyOneSideRequiresGrad) {
  Tensor a = random_leaf({2, 3, 4}, 1);
  Tensor b = random_leaf({3, 1}, 2).set_requires_grad(false);
  EXPECT_TRUE(
      gradcheck([](const std::vector<Tensor>& in) { return ops::mul(in[0], in[1]); }, {a, b}));
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& in) { return ops::div(in[1], in[0]); },
                        {uniform_leaf({2, 3, 4}, 3, 0.5, 2.0), random_leaf({3, 1}, 4)}));
}

TEST(GradcheckElementwise, UnaryOnAnyInput) {
  const Tensor x = random_leaf({2, 3}, 5);
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& in) { return ops::neg(in[0]); }, {x}));
  EXPECT_TRUE(
      gradcheck([](const std::vector<Tensor>& in) { return ops::scale(in[0], -2.5); }, {x}));
  EXPECT_TRUE(
      gradcheck([](const std::vector<Tensor>& in) { return ops::add_scalar(in[0], 3.25); }, {x}));
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& in) { return ops::exp(in[0]); }, {x}));
  // Integer exponents are defined for negative bases.
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& in) { return ops::pow(in[0], 3.0); }, {x}));
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& in) { return ops::pow(in[0], 2.0); }, {x}));
}

TEST(GradcheckElementwise, UnaryOnPositiveInput) {
  const Tensor x = uniform_leaf({2, 3}, 6, 0.5, 2.0);
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& in) { return ops::log(in[0]); }, {x}));
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& in) { return ops::sqrt(in[0]); }, {x}));
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& in) { return ops::rsqrt(in[0]); }, {x}));
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& in) { return ops::pow(in[0], 2.5); }, {x}));
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& in) { return ops::pow(in[0], -1.5); }, {x}));
}

TEST(GradcheckElementwise, PowZeroExponentHasZeroGradientAtZero) {
  // d(x^0)/dx = 0 everywhere, also at x = 0 where p·x^(p-1) is 0·inf (as PyTorch).
  Tensor x = Tensor::from_vector(std::vector<double>{0.0, 2.0, -1.0}, {3}, DType::F64);
  x.set_requires_grad(true);
  ops::sum_all(ops::pow(x, 0.0)).backward();
  EXPECT_EQ(x.grad().to_vector_f64(), (std::vector<double>{0.0, 0.0, 0.0}));
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& in) { return ops::pow(in[0], 0.0); },
                        {random_leaf({4}, 12)}));
}

TEST(GradcheckElementwise, UnaryOnNonContiguousView) {
  const Tensor x = uniform_leaf({3, 4}, 7, 0.5, 2.0);
  EXPECT_TRUE(gradcheck(
      [](const std::vector<Tensor>& in) { return ops::log(in[0].transpose(0, 1).narrow(0, 1, 2)); },
      {x}));
}

// ---- reductions -----------------------------------------------------------------------------

TEST(GradcheckReduce, SumMeanMaxAlongEveryDim) {
  const Tensor x = random_leaf({2, 3, 4}, 8);
  for (int64_t dim : {0, 1, 2, -1})
    for (bool keepdim : {false, true}) {
      SCOPED_TRACE("dim " + std::to_string(dim) + (keepdim ? " keepdim" : ""));
      EXPECT_TRUE(gradcheck(
          [=](const std::vector<Tensor>& in) { return ops::sum(in[0], dim, keepdim); }, {x}));
      EXPECT_TRUE(gradcheck(
          [=](const std::vector<Tensor>& in) { return ops::mean(in[0], dim, keepdim); }, {x}));
      EXPECT_TRUE(gradcheck(
          [=](const std::vector<Tensor>& in) { return ops::max(in[0], dim, keepdim); }, {x}));
    }
}

TEST(GradcheckReduce, SumAllMeanAll) {
  const Tensor x = random_leaf({3, 4}, 9);
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& in) { return ops::sum_all(in[0]); }, {x}));
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& in) { return ops::mean_all(in[0]); }, {x}));
  // Through a non-contiguous view, and of a 0-d tensor.
  EXPECT_TRUE(gradcheck(
      [](const std::vector<Tensor>& in) { return ops::mean_all(in[0].transpose(0, 1)); }, {x}));
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& in) { return ops::sum_all(in[0]); },
                        {random_leaf({}, 10)}));
}

TEST(GradcheckReduce, ReductionsOfNonContiguousInput) {
  const Tensor x = random_leaf({4, 3}, 11);
  EXPECT_TRUE(gradcheck(
      [](const std::vector<Tensor>& in) { return ops::max(in[0].transpose(0, 1), 1, false); },
      {x}));
  EXPECT_TRUE(gradcheck(
      [](const std::vector<Tensor>& in) { return ops::sum(in[0].transpose(0, 1), 0, true); }, {x}));
}

// ---- matmul and linear ----------------------------------------------------------------------

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
