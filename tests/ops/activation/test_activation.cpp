// CPU forward values of silu and swiglu against x·sigmoid(x) computed here in double (F64,
// F32, saturated inputs), and their error paths: integer input, gate and up that differ
// in shape or dtype, an undefined tensor.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "microllm/ops/ops.h"
#include "ops/op_test_util.h"

using namespace microllm;
using microllm::testing::optest::all_close;
using microllm::testing::optest::f64;
using microllm::testing::optest::randn_tensor;

namespace {

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

}  // namespace

// ---- forward ---------------------------------------------------------------------------------

TEST(OpsForward, SiluSwigluMatch) {
  const Tensor gate = randn_tensor({3, 4}, 7, DType::F64, 0.0, 4.0);
  const Tensor up = randn_tensor({3, 4}, 8);
  const std::vector<double> g = gate.to_vector_f64(), u = up.to_vector_f64();
  std::vector<double> silu, swiglu;
  for (size_t i = 0; i < g.size(); ++i) {
    silu.push_back(g[i] * sigmoid(g[i]));
    swiglu.push_back(g[i] * sigmoid(g[i]) * u[i]);
  }
  EXPECT_TRUE(all_close(ops::silu(gate), silu, 1e-15, 1e-14));
  EXPECT_TRUE(all_close(ops::swiglu(gate, up), swiglu, 1e-15, 1e-14));
  EXPECT_TRUE(all_close(ops::silu(gate.to(DType::F32)), silu, 1e-6, 1e-6));
  // Large negative and positive inputs: silu → 0 and → x.
  EXPECT_TRUE(all_close(ops::silu(f64({-80.0, 80.0}, {2})), {0.0, 80.0}, 1e-30, 1e-15));
}

// ---- bad input -------------------------------------------------------------------------------

namespace {
// Zero tensors of a shape, for the error cases.
Tensor f32(const Shape& shape) { return Tensor::zeros(shape, DType::F32); }
Tensor f64(const Shape& shape) { return Tensor::zeros(shape, DType::F64); }
Tensor i64(const Shape& shape) { return Tensor::zeros(shape, DType::I64); }
}  // namespace

TEST(BadInput, Activations) {
  EXPECT_ERROR(ops::silu(i64({3})), "silu", {"i64(3,)"});
  EXPECT_ERROR(ops::swiglu(f32({2, 3}), f32({3, 2})), "swiglu",
               {"f32(2, 3)", "f32(3, 2)", "differ in shape"});
  EXPECT_ERROR(ops::swiglu(f32({2, 3}), f64({2, 3})), "swiglu", {"f32(2, 3)", "f64(2, 3)"});
  EXPECT_ERROR(ops::swiglu(f32({2, 3}), Tensor()), "swiglu", {"'up'", "undefined"});
}
