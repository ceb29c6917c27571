// Finite-difference gradient checks (F64, tests/support/gradcheck.h) of the elementwise
// operators: the binary ops on every broadcast pattern, one side without a gradient, the
// unary ops on any and on positive inputs, pow's zero exponent, non-contiguous views.
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
