// CPU forward of index_select (repeated indices along dims 0 and 1, I32 indices, a
// non-contiguous source, an empty index) and its error paths: indices out of range (with
// the position), a non-1-D or non-integer index, a dim out of range.
#include <gtest/gtest.h>

#include <vector>

#include "microllm/ops/ops.h"
#include "ops/op_test_util.h"

using namespace microllm;
using microllm::testing::optest::f64;
using microllm::testing::optest::ids;

// ---- forward ---------------------------------------------------------------------------------

TEST(OpsForward, IndexSelectValues) {
  const Tensor x = f64({0, 1, 2, 10, 11, 12, 20, 21, 22, 30, 31, 32}, {4, 3});
  EXPECT_EQ(ops::index_select(x, 0, ids({3, 0, 3}, {3})).to_vector_f64(),
            (std::vector<double>{30, 31, 32, 0, 1, 2, 30, 31, 32}));
  EXPECT_EQ(ops::index_select(x, 1, ids({2, 2, 0}, {3}, DType::I32)).to_vector_f64(),
            (std::vector<double>{2, 2, 0, 12, 12, 10, 22, 22, 20, 32, 32, 30}));
  // A non-contiguous source.
  EXPECT_EQ(ops::index_select(x.transpose(0, 1), 1, ids({1}, {1})).to_vector_f64(),
            (std::vector<double>{10, 11, 12}));
  EXPECT_EQ(ops::index_select(x, 0, ids({}, {0})).shape(), (Shape{0, 3}));
}

// ---- bad input -------------------------------------------------------------------------------

namespace {
// Zero tensors of a shape, for the error cases.
Tensor f32(const Shape& shape) { return Tensor::zeros(shape, DType::F32); }
Tensor i64(const Shape& shape) { return Tensor::zeros(shape, DType::I64); }
}  // namespace

TEST(BadInput, IndexSelect) {
  const Tensor x = f32({4, 3});
  EXPECT_ERROR(ops::index_select(x, 0, ids({0, 4}, {2})), "index_select",
               {"index 4", "position 1", "[0, 4)", "f32(4, 3)"});
  EXPECT_ERROR(ops::index_select(x, 1, ids({-1}, {1}, DType::I32)), "index_select",
               {"index -1", "[0, 3)"});
  EXPECT_ERROR(ops::index_select(x, 0, i64({1, 2})), "index_select", {"1-D", "i64(1, 2)"});
  EXPECT_ERROR(ops::index_select(x, 2, ids({0}, {1})), "index_select", {"dimension 2", "rank 2"});
  EXPECT_ERROR(ops::index_select(x, 0, f32({1})), "index_select", {"'index'", "f32(1,)"});
}
