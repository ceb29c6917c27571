// CPU forward of embedding (the rows picked, bit-exact, F64 and BF16 tables, I32 ids) and
// its error paths: ids out of range (with the position), wrong rank, non-integer ids, an
// integer table.
#include <gtest/gtest.h>

#include <vector>

#include "microllm/ops/ops.h"
#include "ops/op_test_util.h"

using namespace microllm;
using microllm::testing::optest::ids;
using microllm::testing::optest::randn_tensor;

// ---- forward ---------------------------------------------------------------------------------

TEST(OpsForward, EmbeddingPicksRows) {
  const Tensor weight = randn_tensor({5, 3}, 11);
  const std::vector<double> w = weight.to_vector_f64();
  const std::vector<int64_t> id_values = {4, 0, 4, 2};
  for (DType dtype : {DType::F64, DType::BF16}) {
    const Tensor table = weight.to(dtype);
    const Tensor out = ops::embedding(table, ids(id_values, {2, 2}, DType::I32));
    EXPECT_EQ(out.shape(), (Shape{2, 2, 3}));
    EXPECT_EQ(out.dtype(), dtype);
    const std::vector<double> t = table.to_vector_f64();
    std::vector<double> want;
    for (int64_t id : id_values)
      want.insert(want.end(), t.begin() + id * 3, t.begin() + id * 3 + 3);
    EXPECT_EQ(out.to_vector_f64(), want);  // a copy: bit-exact
  }
}

// ---- bad input -------------------------------------------------------------------------------

namespace {
// Zero tensors of a shape, for the error cases.
Tensor f32(const Shape& shape) { return Tensor::zeros(shape, DType::F32); }
Tensor i64(const Shape& shape) { return Tensor::zeros(shape, DType::I64); }
}  // namespace

TEST(BadInput, Embedding) {
  const Tensor weight = f32({5, 3});
  EXPECT_ERROR(ops::embedding(weight, ids({1, 7}, {2})), "embedding",
               {"id 7", "position 1", "[0, 5)"});
  EXPECT_ERROR(ops::embedding(weight, ids({-1}, {1}, DType::I32)), "embedding",
               {"id -1", "[0, 5)"});
  EXPECT_ERROR(ops::embedding(weight, ids({5}, {1})), "embedding", {"id 5"});
  EXPECT_ERROR(ops::embedding(f32({5}), ids({1}, {1})), "embedding", {"rank 2", "f32(5,)"});
  EXPECT_ERROR(ops::embedding(weight, f32({2})), "embedding", {"'ids'", "f32(2,)"});
  EXPECT_ERROR(ops::embedding(i64({5, 3}), ids({1}, {1})), "embedding", {"'weight'", "i64(5, 3)"});
}
