// CPU forward of concat (values along dims 0 and 1, a transposed input, integer tensors),
// join (a view of neighbours in memory, concat's copy otherwise) and split (views; backward
// joins the parts' gradients, zeros for a part without one), and the error paths: no
// inputs, mismatched shapes, ranks and dtypes, a dim out of range, split sizes that do not
// add up (BadInput.TensorOps also checks cast of an undefined tensor).
#include <gtest/gtest.h>

#include <vector>

#include "microllm/autograd/node.h"
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

TEST(OpsForward, JoinIsAViewOfNeighboursAndConcatOtherwise) {
  std::vector<double> values(24);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<double>(i);
  const Tensor base = f64(values, {6, 4});
  // Row blocks of one matrix, in order: a view of it.
  const Tensor rows =
      ops::join({base.narrow(0, 0, 2), base.narrow(0, 2, 1), base.narrow(0, 3, 3)}, 0);
  EXPECT_TRUE(rows.storage() == base.storage());
  EXPECT_EQ(rows.offset(), 0);
  EXPECT_EQ(rows.to_vector_f64(), values);
  // The two halves of the last dim: a view too.
  const Tensor halves = ops::join({base.narrow(1, 0, 1), base.narrow(1, 1, 3)}, -1);
  EXPECT_TRUE(halves.storage() == base.storage());
  EXPECT_EQ(halves.to_vector_f64(), values);
  // Out of order, or broadcast along the dim (stride 0): concat's copy, concat's values.
  const std::vector<Tensor> swapped = {base.narrow(0, 3, 3), base.narrow(0, 0, 3)};
  const Tensor copied = ops::join(swapped, 0);
  EXPECT_FALSE(copied.storage() == base.storage());
  EXPECT_EQ(copied.to_vector_f64(), ops::concat(swapped, 0).to_vector_f64());
  const Tensor row = f64({1, 2}, {1, 2});
  const std::vector<Tensor> repeated = {row.expand({2, 2}), row.expand({3, 2})};
  EXPECT_FALSE(ops::join(repeated, 0).storage() == row.storage());
  EXPECT_EQ(ops::join(repeated, 0).to_vector_f64(),
            (std::vector<double>{1, 2, 1, 2, 1, 2, 1, 2, 1, 2}));
}

TEST(OpsForward, SplitGivesViewsAndItsBackwardJoins) {
  Tensor x = f64({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, {2, 6});
  x.set_requires_grad(true);
  const std::vector<Tensor> parts = ops::split(x, 1, {2, 0, 3, 1});
  ASSERT_EQ(parts.size(), 4u);
  EXPECT_EQ(parts[0].to_vector_f64(), (std::vector<double>{1, 2, 7, 8}));
  EXPECT_EQ(parts[1].shape(), (Shape{2, 0}));
  EXPECT_EQ(parts[2].to_vector_f64(), (std::vector<double>{3, 4, 5, 9, 10, 11}));
  EXPECT_TRUE(parts[3].storage() == x.storage());
  // Gradients for parts 0 and 2 only: part 3's slice of x's gradient is zero.
  const Tensor loss =
      ops::add(ops::sum_all(ops::scale(parts[0], 2.0)), ops::sum_all(ops::mul(parts[2], parts[2])));
  loss.backward();
  EXPECT_EQ(x.grad().to_vector_f64(),
            (std::vector<double>{2, 2, 6, 8, 10, 0, 2, 2, 18, 20, 22, 0}));
}

TEST(OpsForward, JoinedNeighboursGetTheirSlicesOfTheGradient) {
  const Tensor base = f64({1, 2, 3, 4, 5, 6}, {3, 2});
  // Two leaves that are neighbours in one storage, as a fused matrix's row blocks are.
  Tensor top = base.narrow(0, 0, 1).detach(), rest = base.narrow(0, 1, 2).detach();
  top.set_requires_grad(true);
  rest.set_requires_grad(true);
  const Tensor joined = ops::join({top, rest}, 0);  // (3, 2) a view of base
  ASSERT_TRUE(joined.storage() == base.storage());
  const Tensor weights = f64({10, 20, 30, 40, 50, 60}, {3, 2});
  ops::sum_all(ops::mul(joined, weights)).backward();
  EXPECT_EQ(top.grad().to_vector_f64(), (std::vector<double>{10, 20}));
  EXPECT_EQ(rest.grad().to_vector_f64(), (std::vector<double>{30, 40, 50, 60}));
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
  EXPECT_ERROR(ops::join({}, 0), "join", {"at least one"});
  EXPECT_ERROR(ops::join({f32({2, 3}), f32({3, 3})}, 1), "join",
               {"tensor 1", "f32(3, 3)", "f32(2, 3)", "dimension 1"});
  EXPECT_ERROR(ops::split(f32({2, 5}), 1, {2, 2}), "split",
               {"add up to 4", "f32(2, 5)", "size 5", "dimension 1"});
  EXPECT_ERROR(ops::split(f32({2, 5}), 1, {}), "split", {"add up to 0"});
  EXPECT_ERROR(ops::split(f32({2, 5}), 1, {6, -1}), "split", {"must not be negative", "-1"});
  EXPECT_ERROR(ops::split(f32({2, 5}), 2, {5}), "split", {"dimension 2", "rank 2"});
  EXPECT_ERROR(ops::cast(Tensor(), DType::F32), "cast", {"'x'", "undefined"});
}
