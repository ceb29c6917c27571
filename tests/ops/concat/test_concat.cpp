// CPU forward of concat (values along dims 0 and 1, a transposed input, integer tensors)
// and its error paths: no inputs, mismatched shapes, ranks and dtypes, a dim out of range
// (BadInput.TensorOps also checks cast of an undefined tensor).
#include <gtest/gtest.h>

#include <vector>

#include "microllm/ops/ops.h"
#include "ops/op_test_util.h"

using namespace microllm;
using microllm::testing::optest::f64;
using microllm::testing::optest::ids;

// ---- forward ---------------------------------------------------------------------------------

TEST(OpsForward, ConcatValues) {
  const Tensor a = f64({1, 2, 3, 4}, {2, 2});
  const Tensor b = f64({5, 6}, {2, 1});
  const Tensor c = f64({7, 8, 9, 10, 11, 12}, {2, 3});
  const Tensor out = ops::concat({a, b, c}, 1);
  EXPECT_EQ(out.shape(), (Shape{2, 6}));
  EXPECT_EQ(out.to_vector_f64(), (std::vector<double>{1, 2, 5, 7, 8, 9, 3, 4, 6, 10, 11, 12}));
  EXPECT_EQ(ops::concat({a, a.transpose(0, 1)}, 0).to_vector_f64(),
            (std::vector<double>{1, 2, 3, 4, 1, 3, 2, 4}));
  // Integer tensors concatenate too.
  EXPECT_EQ(ops::concat({ids({1, 2}, {2}), ids({3}, {1})}, 0).to_vector_i64(),
            (std::vector<int64_t>{1, 2, 3}));
}

// ---- bad input -------------------------------------------------------------------------------

// f64(shape) here (zeros) overloads optest::f64(values, shape).
namespace {
// Zero tensors of a shape, for the error cases.
Tensor f32(const Shape& shape) { return Tensor::zeros(shape, DType::F32); }
Tensor f64(const Shape& shape) { return Tensor::zeros(shape, DType::F64); }
}  // namespace

TEST(BadInput, TensorOps) {
  EXPECT_ERROR(ops::concat({}, 0), "concat", {"at least one"});
  EXPECT_ERROR(ops::concat({f32({2, 3}), f32({3, 3})}, 1), "concat",
               {"tensor 1", "f32(3, 3)", "f32(2, 3)", "dimension 1"});
  EXPECT_ERROR(ops::concat({f32({2, 3}), f32({2, 3, 1})}, 0), "concat", {"f32(2, 3, 1)"});
  EXPECT_ERROR(ops::concat({f32({2, 3}), f64({2, 3})}, 0), "concat", {"f32(2, 3)", "f64(2, 3)"});
  EXPECT_ERROR(ops::concat({f32({2, 3}), f32({2, 3})}, 2), "concat", {"dimension 2", "rank 2"});
  EXPECT_ERROR(ops::cast(Tensor(), DType::F32), "cast", {"'x'", "undefined"});
}
