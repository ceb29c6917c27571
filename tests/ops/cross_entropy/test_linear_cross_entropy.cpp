// linear_cross_entropy (the chunked LM head + loss) and lm_head_cross_entropy (the logits'
// gradient written in the forward) against the reference path cross_entropy(linear(hidden,
// weight)) on the CPU: loss and both gradients for chunk sizes from one row to more than all
// rows, with ignored rows, in F64, F32 and BF16 (widened); the fused node bit for bit at
// dloss = 1 and within the contract at other dloss; every row ignored; finite differences in
// F64; and the error paths.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/expect_error.h"
#include "microllm/autograd/node.h"
#include "microllm/ops/ops.h"
#include "ops/op_test_util.h"
#include "support/gradcheck.h"

using namespace microllm;
using microllm::testing::gradcheck;
using microllm::testing::random_leaf;
using microllm::testing::throws_error;
using microllm::testing::optest::ids;
using microllm::testing::optest::randn_tensor;

namespace {

struct LossAndGrads {
  double loss;
  std::vector<double> dh, dw;
};

constexpr int64_t kReference = 0, kFused = -1;  // `chunk` values that are not chunk sizes

// hidden (N, C) and weight (V, C) of `dtype` as fresh leaves; chunk kReference = the reference
// path, kFused = lm_head_cross_entropy, else linear_cross_entropy with chunks of that many
// rows. The backward starts from dloss = `dloss`.
LossAndGrads run(const Tensor& hidden0, const Tensor& weight0, const Tensor& targets, DType dtype,
                 int64_t chunk, double dloss = 1.0) {
  Tensor h = hidden0.to(dtype).clone().detach(), w = weight0.to(dtype).clone().detach();
  h.set_requires_grad(true);
  w.set_requires_grad(true);
  const DType loss_dtype = dtype == DType::F64 ? DType::F64 : DType::F32;
  Tensor loss =
      chunk == kReference ? ops::cross_entropy(ops::linear(h, w), targets, -100, loss_dtype)
      : chunk == kFused   ? ops::lm_head_cross_entropy(h, w, targets, -100, loss_dtype)
                          : ops::linear_cross_entropy(h, w, targets, -100, loss_dtype, chunk);
  if (dloss == 1.0)
    loss.backward();
  else
    ops::scale(loss, dloss).backward();
  return {loss.item(), h.grad().to_vector_f64(), w.grad().to_vector_f64()};
}

double max_abs(const std::vector<double>& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::abs(x));
  return m;
}

void expect_close(const LossAndGrads& a, const LossAndGrads& ref, double rtol, const char* what) {
  EXPECT_NEAR(a.loss, ref.loss, rtol * std::abs(ref.loss)) << what;
  for (const auto& [x, y, name] :
       {std::tuple{&a.dh, &ref.dh, "hidden"}, std::tuple{&a.dw, &ref.dw, "weight"}}) {
    ASSERT_EQ(x->size(), y->size());
    const double scale = max_abs(*y);
    for (size_t i = 0; i < x->size(); ++i)
      ASSERT_NEAR((*x)[i], (*y)[i], rtol * scale) << what << " d" << name << "[" << i << "]";
  }
}

}  // namespace

TEST(OpsForward, LinearCrossEntropyEqualsTheWholeLogitsPath) {
  const int64_t N = 7, C = 5, V = 11;
  const Tensor hidden = randn_tensor({N, C}, 31);
  const Tensor weight = randn_tensor({V, C}, 32);
  const Tensor targets = ids({3, -100, 0, 10, 7, -100, 5}, {N});
  for (DType dtype : {DType::F64, DType::F32, DType::BF16}) {
    const LossAndGrads ref = run(hidden, weight, targets, dtype, 0);
    // BF16: the same widened values; only the GEMM groupings and the F32 sums of dW differ.
    const double rtol = dtype == DType::F64 ? 1e-12 : dtype == DType::F32 ? 2e-6 : 1e-2;
    for (int64_t chunk : {int64_t{1}, int64_t{2}, int64_t{3}, N, int64_t{100}}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " chunk " + std::to_string(chunk));
      expect_close(run(hidden, weight, targets, dtype, chunk), ref, rtol, "chunked");
    }
  }
}

TEST(OpsForward, LmHeadCrossEntropyEqualsTheWholeLogitsPath) {
  const int64_t N = 7, C = 5, V = 11;
  const Tensor hidden = randn_tensor({N, C}, 41);
  const Tensor weight = randn_tensor({V, C}, 42);
  const Tensor targets = ids({3, -100, 0, 10, 7, -100, 5}, {N});
  for (DType dtype : {DType::F64, DType::F32, DType::BF16}) {
    SCOPED_TRACE(dtype_name(dtype));
    // dloss = 1: the same logits, the same gradient formula and the same products, so the
    // same bits.
    const LossAndGrads ref = run(hidden, weight, targets, dtype, kReference);
    const LossAndGrads fused = run(hidden, weight, targets, dtype, kFused);
    EXPECT_EQ(fused.loss, ref.loss);
    EXPECT_EQ(fused.dh, ref.dh);
    EXPECT_EQ(fused.dw, ref.dw);
    // Other dloss: the scale goes into the products' operands instead of the logits' gradient.
    const double rtol = dtype == DType::F64 ? 1e-12 : dtype == DType::F32 ? 2e-6 : 1e-2;
    for (double dloss : {0.25, 1.0 / 3.0, -2.5}) {
      SCOPED_TRACE("dloss " + std::to_string(dloss));
      expect_close(run(hidden, weight, targets, dtype, kFused, dloss),
                   run(hidden, weight, targets, dtype, kReference, dloss), rtol, "fused");
    }
  }
}

// Without a backward to come (no gradient asked for, or grad mode off) the node computes the
// loss alone: the reference path's value, and no graph.
TEST(OpsForward, LmHeadCrossEntropyWithoutGradientsIsTheLossAlone) {
  const Tensor h = randn_tensor({6, 4}, 46, DType::F32), w = randn_tensor({9, 4}, 47, DType::F32);
  const Tensor t = ids({1, -100, 8, 0, 3, 3}, {6});
  const double ref = ops::cross_entropy(ops::linear(h, w), t, -100, DType::F32).item();
  EXPECT_EQ(ops::lm_head_cross_entropy(h, w, t, -100, DType::F32).item(), ref);
  Tensor hg = h.clone(), wg = w.clone();
  hg.set_requires_grad(true);
  wg.set_requires_grad(true);
  autograd::NoGradGuard no_grad;
  const Tensor loss = ops::lm_head_cross_entropy(hg, wg, t, -100, DType::F32);
  EXPECT_EQ(loss.item(), ref);
  EXPECT_FALSE(loss.requires_grad());
}

TEST(OpsForward, LinearCrossEntropyAllIgnoredIsZeroWithZeroGrads) {
  for (int64_t chunk : {int64_t{2}, kFused}) {
    const LossAndGrads r = run(randn_tensor({3, 4}, 33), randn_tensor({6, 4}, 34),
                               ids({-100, -100, -100}, {3}), DType::F32, chunk);
    EXPECT_EQ(r.loss, 0.0) << chunk;
    EXPECT_EQ(max_abs(r.dh), 0.0) << chunk;
    EXPECT_EQ(max_abs(r.dw), 0.0) << chunk;
  }
}

TEST(GradcheckLayers, LinearCrossEntropyChunked) {
  const Tensor targets = ids({2, -100, 0, 4, 1}, {5});
  for (int64_t chunk : {1, 2, 5}) {
    EXPECT_TRUE(gradcheck(
        [=](const std::vector<Tensor>& in) {
          return ops::linear_cross_entropy(in[0], in[1], targets, -100, DType::F64, chunk);
        },
        {random_leaf({5, 3}, 35), random_leaf({6, 3}, 36)}))
        << "chunk " << chunk;
  }
  EXPECT_TRUE(gradcheck(
      [=](const std::vector<Tensor>& in) {
        return ops::lm_head_cross_entropy(in[0], in[1], targets, -100, DType::F64);
      },
      {random_leaf({5, 3}, 35), random_leaf({6, 3}, 36)}))
      << "lm_head_cross_entropy";
}

TEST(BadInput, LinearCrossEntropy) {
  const Tensor h = randn_tensor({4, 3}, 37, DType::F32), w = randn_tensor({5, 3}, 38, DType::F32);
  const Tensor t = ids({0, 1, 2, 3}, {4});
  const char* op = "linear_cross_entropy";
  EXPECT_TRUE(throws_error([&] { ops::linear_cross_entropy(h, w, t, -100, DType::F32, 0); }, op,
                           {"chunk_rows must be ≥ 1"}));
  EXPECT_TRUE(throws_error(
      [&] {
        ops::linear_cross_entropy(h, randn_tensor({5, 4}, 39, DType::F32), t, -100, DType::F32, 2);
      },
      op, {"weight must be (V, 3)"}));
  EXPECT_TRUE(throws_error(
      [&] {
        ops::linear_cross_entropy(h, w, ids({0, 1, 2}, {3}), -100, DType::F32, 2);
      },
      op, {"targets must be (4)"}));
  EXPECT_TRUE(throws_error(
      [&] {
        ops::linear_cross_entropy(h, w, ids({0, 1, 5, 3}, {4}), -100, DType::F32, 2);
      },
      op, {"target 5", "[0, 5)"}));
  EXPECT_TRUE(
      throws_error([&] { ops::linear_cross_entropy(h, w.to(DType::F64), t, -100, DType::F32, 2); },
                   op, {"weight"}));
}

TEST(BadInput, LmHeadCrossEntropy) {
  const Tensor h = randn_tensor({4, 3}, 43, DType::F32), w = randn_tensor({5, 3}, 44, DType::F32);
  const Tensor t = ids({0, 1, 2, 3}, {4});
  const char* op = "lm_head_cross_entropy";
  EXPECT_TRUE(throws_error(
      [&] {
        ops::lm_head_cross_entropy(h, randn_tensor({5, 4}, 45, DType::F32), t, -100, DType::F32);
      },
      op, {"weight must be (V, 3)"}));
  EXPECT_TRUE(throws_error(
      [&] {
        ops::lm_head_cross_entropy(h, w, ids({0, 1, 2}, {3}), -100, DType::F32);
      },
      op, {"targets must be (4)"}));
  EXPECT_TRUE(throws_error(
      [&] {
        ops::lm_head_cross_entropy(h, w, ids({0, 1, 5, 3}, {4}), -100, DType::F32);
      },
      op, {"target 5", "[0, 5)"}));
  EXPECT_TRUE(throws_error([&] { ops::lm_head_cross_entropy(h, w, t, -100, DType::I64); }, op,
                           {"loss dtype must be floating"}));
}
