// CPU forward values of the elementwise operators (add, sub, mul, div with broadcasting;
// exp, log, sqrt, rsqrt, pow, neg, scale, add_scalar) against values computed here in
// double, and their error paths: shapes that cannot be broadcast, mixed dtypes, integer
// inputs, undefined tensors. Each error names the op and the offending shape or dtype.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "microllm/ops/ops.h"
#include "ops/op_test_util.h"

using namespace microllm;
using microllm::testing::optest::all_close;
using microllm::testing::optest::f64;

// ---- forward ---------------------------------------------------------------------------------

TEST(OpsForward, ElementwiseBroadcastValues) {
  const Tensor a = f64({1, 2, 3, 4, 5, 6}, {2, 3});
  const Tensor b = f64({10, 20, 40}, {3});
  EXPECT_TRUE(all_close(ops::add(a, b), {11, 22, 43, 14, 25, 46}, 0.0));
  EXPECT_TRUE(all_close(ops::sub(b, a), {9, 18, 37, 6, 15, 34}, 0.0));
  EXPECT_TRUE(all_close(ops::mul(a, f64({2, -1}, {2, 1})), {2, 4, 6, -4, -5, -6}, 0.0));
  EXPECT_TRUE(all_close(ops::div(a, b), {0.1, 0.1, 0.075, 0.4, 0.25, 0.15}, 1e-15));
  EXPECT_EQ(ops::add(a, b).shape(), (Shape{2, 3}));
  EXPECT_EQ(ops::add(f64({1}, {1, 1}), a).shape(), (Shape{2, 3}));
}

TEST(OpsForward, UnaryValues) {
  const std::vector<double> v = {0.25, 1.0, 4.0};
  const Tensor x = f64(v, {3});
  std::vector<double> e, l, s, r, p;
  for (double a : v) {
    e.push_back(std::exp(a));
    l.push_back(std::log(a));
    s.push_back(std::sqrt(a));
    r.push_back(1.0 / std::sqrt(a));
    p.push_back(std::pow(a, 1.5));
  }
  EXPECT_TRUE(all_close(ops::exp(x), e, 0.0, 1e-15));
  EXPECT_TRUE(all_close(ops::log(x), l, 1e-15));
  EXPECT_TRUE(all_close(ops::sqrt(x), s, 0.0, 1e-15));
  EXPECT_TRUE(all_close(ops::rsqrt(x), r, 0.0, 1e-15));
  EXPECT_TRUE(all_close(ops::pow(x, 1.5), p, 0.0, 1e-15));
  EXPECT_TRUE(all_close(ops::neg(x), {-0.25, -1.0, -4.0}, 0.0));
  EXPECT_TRUE(all_close(ops::scale(x, 3.0), {0.75, 3.0, 12.0}, 0.0));
  EXPECT_TRUE(all_close(ops::add_scalar(x, -1.0), {-0.75, 0.0, 3.0}, 0.0));
}

// ---- bad input -------------------------------------------------------------------------------

// f64(shape) here (zeros) overloads optest::f64(values, shape).
namespace {
// Zero tensors of a shape, for the error cases.
Tensor f32(const Shape& shape) { return Tensor::zeros(shape, DType::F32); }
Tensor f64(const Shape& shape) { return Tensor::zeros(shape, DType::F64); }
Tensor i64(const Shape& shape) { return Tensor::zeros(shape, DType::I64); }
}  // namespace

TEST(BadInput, Elementwise) {
  EXPECT_ERROR(ops::add(f32({2, 3}), f32({4})), "add", {"(2, 3)", "(4,)", "cannot be broadcast"});
  EXPECT_ERROR(ops::mul(f32({2, 3, 4}), f32({3, 2})), "mul", {"(2, 3, 4)", "(3, 2)"});
  EXPECT_ERROR(ops::sub(f32({2, 3}), f64({2, 3})), "sub",
               {"f32(2, 3)", "f64(2, 3)", "different dtypes"});
  EXPECT_ERROR(ops::div(i64({3}), i64({3})), "div", {"'a'", "i64(3,)"});
  EXPECT_ERROR(ops::add(f32({3}), Tensor()), "add", {"'b'", "undefined"});
  EXPECT_ERROR(ops::exp(i64({2})), "exp", {"i64(2,)"});
  EXPECT_ERROR(ops::log(Tensor::zeros({2}, DType::Bool)), "log", {"bool(2,)"});
  EXPECT_ERROR(ops::pow(Tensor::zeros({2}, DType::I32), 2.0), "pow", {"i32(2,)"});
  EXPECT_ERROR(ops::scale(Tensor::zeros({2}, DType::U8), 2.0), "scale", {"u8(2,)"});
}
