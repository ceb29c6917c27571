// The reverse-mode engine: gradient accumulation across backward calls, zero_grad,
// NoGradGuard, detach, fan-out and diamond graphs, which tensors may require gradients,
// explicit output gradients, and the errors of misuse. Expected gradients are worked by hand.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "microllm/autograd/node.h"
#include "microllm/ops/ops.h"
#include "ops/op_test_util.h"

using namespace microllm;
using microllm::testing::optest::all_close;
using microllm::testing::optest::f64;

namespace {
// A dense F64 leaf that requires a gradient.
Tensor leaf(const std::vector<double>& values, const Shape& shape) {
  Tensor t = f64(values, shape);
  t.set_requires_grad(true);
  return t;
}
}  // namespace

TEST(Autograd, GradientsAccumulateAcrossBackwardCalls) {
  Tensor x = leaf({1, -2, 3}, {3});
  ops::sum_all(ops::mul(x, x)).backward();  // d/dx Σx² = 2x
  EXPECT_TRUE(all_close(x.grad(), {2, -4, 6}, 0.0));
  ops::sum_all(ops::scale(x, 3.0)).backward();  // + 3
  EXPECT_TRUE(all_close(x.grad(), {5, -1, 9}, 0.0));
  EXPECT_EQ(x.grad().dtype(), DType::F64);
  EXPECT_EQ(x.grad().shape(), (Shape{3}));
}

TEST(Autograd, FirstGradientIsNotAliasedWithTheGraph) {
  // x.grad starts as a copy: updating it must not change what another leaf received.
  Tensor x = leaf({1, 2}, {2});
  Tensor y = leaf({3, 4}, {2});
  ops::sum_all(ops::add(x, y)).backward();
  x.grad().fill(100.0);
  EXPECT_TRUE(all_close(y.grad(), {1, 1}, 0.0));
}

TEST(Autograd, ZeroGradDropsTheGradient) {
  Tensor x = leaf({1, 2}, {2});
  ops::sum_all(ops::exp(x)).backward();
  ASSERT_TRUE(x.grad().defined());
  x.zero_grad();
  EXPECT_FALSE(x.grad().defined());
  ops::sum_all(ops::scale(x, 2.0)).backward();  // starts again from nothing
  EXPECT_TRUE(all_close(x.grad(), {2, 2}, 0.0));
}

TEST(Autograd, GradBufferHoldsTheGradientAndGrowsInPlace) {
  Tensor x = leaf({1, -2, 3}, {3});
  const Tensor buffer = f64({7, 7, 7}, {3});  // stale values: the first gradient replaces them
  x.set_grad_buffer(buffer);
  EXPECT_TRUE(x.grad_buffer().same(buffer));
  ops::sum_all(ops::mul(x, x)).backward();  // 2x
  EXPECT_TRUE(x.grad().same(buffer));
  EXPECT_TRUE(all_close(buffer, {2, -4, 6}, 0.0));
  ops::sum_all(ops::scale(x, 3.0)).backward();  // + 3, added in place
  EXPECT_TRUE(x.grad().same(buffer));
  EXPECT_TRUE(all_close(buffer, {5, -1, 9}, 0.0));
  // zero_grad drops the gradient but keeps the buffer: the next pass starts from nothing.
  x.zero_grad();
  EXPECT_FALSE(x.grad().defined());
  EXPECT_TRUE(x.grad_buffer().same(buffer));
  ops::sum_all(ops::scale(x, 2.0)).backward();
  EXPECT_TRUE(all_close(buffer, {2, 2, 2}, 0.0));
  // A gradient set elsewhere grows by new sums and leaves the buffer alone.
  x.set_grad(f64({10, 20, 30}, {3}));
  ops::sum_all(x).backward();
  EXPECT_TRUE(all_close(x.grad(), {11, 21, 31}, 0.0));
  EXPECT_TRUE(all_close(buffer, {2, 2, 2}, 0.0));
  EXPECT_THROW(x.set_grad_buffer(f64({1, 2}, {2})), Error);
  EXPECT_THROW(x.set_grad_buffer(f64({1, 2, 3}, {3}).to(DType::F32)), Error);
  x.set_grad_buffer(Tensor());
  EXPECT_FALSE(x.grad_buffer().defined());
}

TEST(Autograd, NoGradGuardRecordsNothingAndNestsCorrectly) {
  Tensor x = leaf({1, 2}, {2});
  EXPECT_TRUE(autograd::grad_mode_enabled());
  {
    autograd::NoGradGuard outer;
    EXPECT_FALSE(autograd::grad_mode_enabled());
    Tensor y = ops::mul(x, x);
    EXPECT_FALSE(y.requires_grad());
    EXPECT_EQ(y.grad_fn(), nullptr);
    EXPECT_FALSE(x.reshape({2, 1}).requires_grad());  // views too
    {
      autograd::NoGradGuard inner;
      EXPECT_FALSE(autograd::grad_mode_enabled());
    }
    EXPECT_FALSE(autograd::grad_mode_enabled());  // the inner guard restored "off"
  }
  EXPECT_TRUE(autograd::grad_mode_enabled());
  EXPECT_NE(ops::mul(x, x).grad_fn(), nullptr);
}

TEST(Autograd, DetachSharesStorageAndStopsGradients) {
  Tensor x = leaf({1, 2, 3}, {3});
  Tensor d = x.detach();
  EXPECT_EQ(d.storage(), x.storage());
  EXPECT_EQ(d.raw_data(), x.raw_data());
  EXPECT_FALSE(d.requires_grad());
  EXPECT_TRUE(d.is_leaf());
  EXPECT_EQ(ops::exp(d).grad_fn(), nullptr);
  d.data<double>()[0] = 10.0;  // shared: the write is visible through x
  EXPECT_EQ(x.to_vector_f64()[0], 10.0);
  // y = x ⊙ detach(x): only the first factor carries a gradient, dy/dx = detach(x).
  ops::sum_all(ops::mul(x, x.detach())).backward();
  EXPECT_TRUE(all_close(x.grad(), {10, 2, 3}, 0.0));
}

TEST(Autograd, TensorUsedTwiceGetsBothPaths) {
  Tensor x = leaf({0.5, -1.5}, {2});
  ops::sum_all(ops::add(x, x)).backward();  // 2
  EXPECT_TRUE(all_close(x.grad(), {2, 2}, 0.0));
  x.zero_grad();
  // sum(x) + sum(x²): 1 + 2x, through two separate subgraphs meeting at the end.
  ops::add(ops::sum_all(x), ops::sum_all(ops::mul(x, x))).backward();
  EXPECT_TRUE(all_close(x.grad(), {2, -2}, 0.0));
}

TEST(Autograd, DiamondGraph) {
  // a = 2x, b = exp(x), c = a ⊙ b: dc/dx = 2·exp(x) + 2x·exp(x).
  Tensor x = leaf({0.0, 1.0, -0.5}, {3});
  Tensor a = ops::scale(x, 2.0);
  Tensor b = ops::exp(x);
  ops::sum_all(ops::mul(a, b)).backward();
  std::vector<double> want;
  for (double v : {0.0, 1.0, -0.5}) want.push_back(2.0 * std::exp(v) * (1.0 + v));
  EXPECT_TRUE(all_close(x.grad(), want, 1e-15, 1e-15));
  // A deeper diamond: both branches share an interior node h = x².
  Tensor y = leaf({1.5, -2.0}, {2});
  Tensor h = ops::mul(y, y);
  ops::sum_all(ops::add(ops::scale(h, 3.0), ops::mul(h, h))).backward();  // 3y² + y⁴
  EXPECT_TRUE(all_close(y.grad(), {6 * 1.5 + 4 * 3.375, 6 * -2.0 + 4 * -8.0}, 1e-14));
}

TEST(Autograd, OnlyFloatingLeavesRequireGrad) {
  Tensor i = Tensor::zeros({3}, DType::I64);
  EXPECT_ERROR(i.set_requires_grad(true), "Tensor::set_requires_grad", {"floating", "i64(3,)"});
  EXPECT_FALSE(i.requires_grad());
  EXPECT_NO_THROW(i.set_requires_grad(false));
  for (DType dtype : {DType::F32, DType::F64, DType::BF16, DType::F16}) {
    Tensor t = Tensor::zeros({2}, dtype);
    EXPECT_NO_THROW(t.set_requires_grad(true));
    EXPECT_TRUE(t.requires_grad());
  }
}

TEST(Autograd, NonLeafCannotChangeRequiresGrad) {
  Tensor x = leaf({1, 2}, {2});
  Tensor y = ops::exp(x);
  EXPECT_FALSE(y.is_leaf());
  EXPECT_TRUE(y.requires_grad());
  EXPECT_ERROR(y.set_requires_grad(false), "Tensor::set_requires_grad", {"leaf"});
  EXPECT_ERROR(y.set_requires_grad(true), "Tensor::set_requires_grad", {"leaf"});
  // A detached copy of it is a leaf again.
  EXPECT_NO_THROW(y.detach().set_requires_grad(true));
}

TEST(Autograd, BackwardWithExplicitGradOnNonScalar) {
  Tensor x = leaf({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor y = ops::scale(x, 3.0);
  y.backward(f64({1, 0, -1, 2, 0.5, 0}, {2, 3}));
  EXPECT_TRUE(all_close(x.grad(), {3, 0, -3, 6, 1.5, 0}, 0.0));
  // Through a view of a leaf: the gradient lands in the viewed positions.
  Tensor z = leaf({1, 2, 3, 4}, {2, 2});
  z.transpose(0, 1).narrow(0, 1, 1).backward(f64({7, 8}, {1, 2}));  // z[:, 1]
  EXPECT_TRUE(all_close(z.grad(), {0, 7, 0, 8}, 0.0));
}

TEST(Autograd, BackwardOnNonScalarNeedsAGradient) {
  Tensor x = leaf({1, 2}, {2});
  EXPECT_ERROR(ops::exp(x).backward(), "backward", {"non-scalar", "f64(2,)"});
  EXPECT_ERROR(ops::exp(x).backward(f64({1, 2, 3}, {3})), "backward", {"f64(3,)", "f64(2,)"});
  // A one-element non-0-d output takes the default gradient 1.
  ops::sum(x, 0, true).backward();
  EXPECT_TRUE(all_close(x.grad(), {1, 1}, 0.0));
}

TEST(Autograd, BackwardWithoutGradientRequiredThrows) {
  Tensor x = f64({1, 2}, {2});
  EXPECT_ERROR(ops::sum_all(x).backward(), "backward", {"does not require a gradient"});
}

TEST(Autograd, GraphIsSingleUse) {
  Tensor x = leaf({1, 2}, {2});
  Tensor y = ops::sum_all(ops::exp(x));
  y.backward();
  EXPECT_ERROR(y.backward(), "backward", {"already used"});
}

TEST(Autograd, OpsWithoutGradInputsRecordNothing) {
  const Tensor a = f64({1, 2, 3, 4}, {2, 2}), b = f64({0.5, 1, 1.5, 2}, {2, 2});
  const Tensor pos = microllm::testing::optest::ids({0, 1}, {2});
  std::vector<Tensor> outs = {
      ops::add(a, b),
      ops::div(a, b),
      ops::exp(a),
      ops::matmul(a, b),
      ops::sum(a, 0),
      ops::max(a, 1),
      ops::mean_all(a),
      ops::softmax(a),
      ops::rms_norm(a, b.narrow(0, 0, 1).squeeze(0), 1e-6),
      ops::silu(a),
      ops::swiglu(a, b),
      ops::concat({a, b}, 0),
      ops::index_select(a, 0, pos),
      ops::embedding(a, pos),
      ops::cross_entropy(a, pos),
      ops::cast(a, DType::F32),
      ops::attention(a.reshape({1, 1, 2, 2}), b.reshape({1, 1, 2, 2}), a.reshape({1, 1, 2, 2})),
      ops::rope(a.reshape({1, 1, 2, 2}), pos, ops::rope_inv_freq(2, 10000.0)),
      a.transpose(0, 1),
      a.reshape({4}),
      a.expand({3, 2, 2})};
  for (size_t i = 0; i < outs.size(); ++i) {
    EXPECT_FALSE(outs[i].requires_grad()) << "output " << i;
    EXPECT_EQ(outs[i].grad_fn(), nullptr) << "output " << i;
    EXPECT_TRUE(outs[i].is_leaf()) << "output " << i;
  }
}

TEST(Autograd, LeafOffThePathGetsNoGradient) {
  Tensor x = leaf({1, 2}, {2});
  Tensor unused = leaf({3, 4}, {2});
  Tensor frozen = f64({5, 6}, {2});
  ops::sum_all(ops::mul(x, frozen)).backward();
  EXPECT_TRUE(all_close(x.grad(), {5, 6}, 0.0));
  EXPECT_FALSE(unused.grad().defined());
  EXPECT_FALSE(frozen.grad().defined());
}

TEST(Autograd, Bf16LeafGetsBf16Gradient) {
  Tensor x = Tensor::from_vector(std::vector<double>{1, 2, 3}, {3}, DType::BF16);
  x.set_requires_grad(true);
  ops::sum_all(ops::scale(x, 2.0)).backward();
  ASSERT_TRUE(x.grad().defined());
  EXPECT_EQ(x.grad().dtype(), DType::BF16);
  EXPECT_TRUE(all_close(x.grad(), {2, 2, 2}, 0.0));
}

// The engine skips a node none of whose outputs received a gradient (scale's backward would
// otherwise be called with an undefined gradient).
TEST(Autograd, UnusedOutputOfMultiOutputOpBehindNonLeaf) {
  // add_rms_norm returns no weight gradient when only `sum` is used. When the weight is
  // itself computed (a non-leaf), the node that made it must cope with receiving nothing.
  Tensor x = leaf({1, 2, 3, 4}, {2, 2});
  Tensor w0 = leaf({1, 1}, {2});
  Tensor weight = ops::scale(w0, 2.0);
  auto r = ops::add_rms_norm(x, f64({0, 0, 0, 0}, {2, 2}), weight, 1e-6);
  EXPECT_NO_THROW(ops::sum_all(r.sum).backward());
  EXPECT_TRUE(all_close(x.grad(), {1, 1, 1, 1}, 0.0));
  EXPECT_FALSE(w0.grad().defined());
}
