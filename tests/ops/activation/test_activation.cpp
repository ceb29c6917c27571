// CPU forward values of silu and swiglu against x·sigmoid(x) computed here in double (F64,
// F32, saturated inputs); swiglu over the halves of one matrix against dense copies (values
// and gradients, bit for bit) and the row layouts it reads in place; the error paths: integer
// input, gate and up that differ in shape or dtype, an undefined tensor, a transposed operand
// of the allocation-free form.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "microllm/ops/ops.h"
#include "ops/activation/swiglu_halves_check.h"
#include "ops/common.h"
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

// swiglu over the two halves of one (…, 2F) matrix — the joined gate/up projection, split —
// reads them in place and gives, value and gradients, the bits of swiglu over dense copies of
// the halves (F64, F32 and BF16, whose CPU path widens to dense F32 copies).
TEST(OpsForward, SwigluOverTheHalvesOfOneMatrixGivesTheBitsOfDenseCopies) {
  for (DType dtype : {DType::F64, DType::F32, DType::BF16})
    for (int64_t F : {5, 8}) {
      const Tensor values = randn_tensor({2, 3, 2 * F}, 31, DType::F64, 0.0, 3.0).to(dtype);
      const Tensor dy = randn_tensor({2, 3, F}, 32, DType::F64).to(dtype);  // (2, 3, F)
      EXPECT_TRUE(microllm::testing::swiglu_halves_match_dense_copies(values, dy))
          << dtype << " F " << F;
    }
}

// The operands swiglu reads in place: dense tensors and blocks of columns of a dense matrix,
// whatever the size-1 dimensions' strides; not a transposed view.
TEST(OpsForward, RowLayoutOfDenseAndColumnBlocks) {
  const Tensor m = Tensor::zeros({4, 3, 10}, DType::F32);  // (4, 3, 10)
  ops::detail::RowLayout layout{};
  ASSERT_TRUE(ops::detail::row_layout(m, layout));
  EXPECT_EQ(layout.rows, 12);
  EXPECT_EQ(layout.cols, 10);
  EXPECT_EQ(layout.ld, 10);
  ASSERT_TRUE(ops::detail::row_layout(m.narrow(2, 6, 4), layout));  // (4, 3, 4) of rows of 10
  EXPECT_EQ(layout.rows, 12);
  EXPECT_EQ(layout.cols, 4);
  EXPECT_EQ(layout.ld, 10);
  ASSERT_TRUE(ops::detail::row_layout(m.narrow(0, 1, 1).narrow(2, 0, 5), layout));  // (1, 3, 5)
  EXPECT_EQ(layout.rows, 3);
  EXPECT_EQ(layout.ld, 10);
  EXPECT_FALSE(ops::detail::row_layout(m.transpose(1, 2), layout));  // unit stride lost
  EXPECT_FALSE(ops::detail::row_layout(m.narrow(1, 0, 2), layout));  // rows not evenly apart
  EXPECT_FALSE(ops::detail::row_layout(m.narrow(1, 0, 2).narrow(2, 0, 4), layout));
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
  // The allocation-free form reads no copy: a transposed gate is an error there.
  EXPECT_ERROR(ops::swiglu_out(f32({3, 2}).transpose(0, 1), f32({2, 3}), f32({2, 3})), "swiglu_out",
               {"'gate'", "block of columns", "strides (1, 2)"});
}
