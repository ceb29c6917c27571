// Finite-difference gradient checks (F64, tests/support/gradcheck.h) of the layer operators:
// softmax / log_softmax, rms_norm / add_rms_norm, silu / swiglu, rope, embedding,
// cross_entropy, attention (causal, GQA, explicit positions, custom scale), cast, concat,
// index_select, and the tensor views.
#include <gtest/gtest.h>

#include "microllm/ops/ops.h"
#include "ops/op_test_util.h"
#include "support/gradcheck.h"

using namespace microllm;
using microllm::testing::gradcheck;
using microllm::testing::random_leaf;
using microllm::testing::optest::ids;

// ---- softmax --------------------------------------------------------------------------------

TEST(GradcheckLayers, SoftmaxAndLogSoftmaxAlongEveryDim) {
  const Tensor x = random_leaf({2, 3, 4}, 1);
  for (int64_t dim : {-1, 0, 1}) {
    SCOPED_TRACE("dim " + std::to_string(dim));
    EXPECT_TRUE(
        gradcheck([=](const std::vector<Tensor>& in) { return ops::softmax(in[0], dim); }, {x}));
    EXPECT_TRUE(gradcheck(
        [=](const std::vector<Tensor>& in) { return ops::log_softmax(in[0], dim); }, {x}));
  }
  // A non-contiguous input.
  EXPECT_TRUE(gradcheck(
      [](const std::vector<Tensor>& in) { return ops::softmax(in[0].transpose(0, 2), -1); }, {x}));
}

// ---- normalization and activations -------------------------------------------------------------

TEST(GradcheckLayers, RmsNorm) {
  // (B, T, C) with C = 5; eps large enough to matter.
  EXPECT_TRUE(
      gradcheck([](const std::vector<Tensor>& in) { return ops::rms_norm(in[0], in[1], 1e-2); },
                {random_leaf({2, 3, 5}, 2), random_leaf({5}, 3)}));
  EXPECT_TRUE(gradcheck(
      [](const std::vector<Tensor>& in) {
        return ops::rms_norm(in[0].transpose(0, 1), in[1], 1e-6);
      },
      {random_leaf({5, 2}, 4), random_leaf({5}, 5)}));
}

TEST(GradcheckLayers, AddRmsNormBothOutputs) {
  const Tensor x = random_leaf({2, 3, 4}, 6), residual = random_leaf({2, 3, 4}, 7);
  const Tensor weight = random_leaf({4}, 8);
  // Both outputs feed the loss: the sum gets the direct gradient plus the norm's.
  EXPECT_TRUE(gradcheck(
      [](const std::vector<Tensor>& in) {
        auto r = ops::add_rms_norm(in[0], in[1], in[2], 1e-5);
        return ops::concat({r.sum, r.normed}, 0);
      },
      {x, residual, weight}));
  // Only the normed output used.
  EXPECT_TRUE(gradcheck(
      [](const std::vector<Tensor>& in) {
        return ops::add_rms_norm(in[0], in[1], in[2], 1e-5).normed;
      },
      {x, residual, weight}));
  // Only the sum used (the weight gets no gradient, so it is not checked).
  Tensor frozen = weight.detach().clone();
  EXPECT_TRUE(gradcheck(
      [](const std::vector<Tensor>& in) {
        return ops::add_rms_norm(in[0], in[1], in[2], 1e-5).sum;
      },
      {x, residual, frozen}));
}

TEST(GradcheckLayers, SiluSwiglu) {
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& in) { return ops::silu(in[0]); },
                        {random_leaf({3, 4}, 9, 0.0, 3.0)}));
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& in) { return ops::swiglu(in[0], in[1]); },
                        {random_leaf({2, 5}, 10, 0.0, 3.0), random_leaf({2, 5}, 11)}));
  EXPECT_TRUE(gradcheck(
      [](const std::vector<Tensor>& in) { return ops::swiglu(in[0].transpose(0, 1), in[1]); },
      {random_leaf({5, 2}, 12), random_leaf({2, 5}, 13)}));
}

// ---- rope -----------------------------------------------------------------------------------

TEST(GradcheckLayers, RopePositionsT) {
  const Tensor inv_freq = ops::rope_inv_freq(4, 10000.0);
  const Tensor positions = ids({3, 7, 11}, {3});  // (T) non-zero positions
  EXPECT_TRUE(gradcheck(
      [=](const std::vector<Tensor>& in) { return ops::rope(in[0], positions, inv_freq); },
      {random_leaf({2, 2, 3, 4}, 14)}));
}

TEST(GradcheckLayers, RopePositionsBT) {
  const Tensor inv_freq = ops::rope_inv_freq(6, 100.0);
  const Tensor positions = ids({0, 5, 2, 9, 1, 4}, {2, 3}, DType::I32);  // (B, T)
  EXPECT_TRUE(gradcheck(
      [=](const std::vector<Tensor>& in) { return ops::rope(in[0], positions, inv_freq); },
      {random_leaf({2, 1, 3, 6}, 15)}));
  // x (B, T, H, D) transposed to (B, H, T, D): a non-contiguous input.
  EXPECT_TRUE(gradcheck(
      [=](const std::vector<Tensor>& in) {
        return ops::rope(in[0].transpose(1, 2), positions, inv_freq);
      },
      {random_leaf({2, 3, 2, 6}, 16)}));
}

// ---- embedding and cross-entropy ----------------------------------------------------------------

TEST(GradcheckLayers, EmbeddingRepeatedIds) {
  // Row 1 is picked three times, row 2 never: its gradient must be zero.
  const Tensor token_ids = ids({1, 3, 1, 1, 0, 4}, {2, 3});
  EXPECT_TRUE(
      gradcheck([=](const std::vector<Tensor>& in) { return ops::embedding(in[0], token_ids); },
                {random_leaf({5, 3}, 17)}));
}

TEST(GradcheckLayers, CrossEntropyWithIgnoredRows) {
  const Tensor targets = ids({2, -100, 0, 4, -100}, {5});
  EXPECT_TRUE(
      gradcheck([=](const std::vector<Tensor>& in) { return ops::cross_entropy(in[0], targets); },
                {random_leaf({5, 5}, 18)}));
  // An ignore_index inside [0, V) and i32 targets.
  const Tensor targets32 = ids({1, 3, 1, 0}, {4}, DType::I32);
  EXPECT_TRUE(gradcheck(
      [=](const std::vector<Tensor>& in) { return ops::cross_entropy(in[0], targets32, 1); },
      {random_leaf({4, 5}, 19)}));
  // Non-contiguous logits: (V, N) transposed.
  EXPECT_TRUE(gradcheck(
      [=](const std::vector<Tensor>& in) {
        return ops::cross_entropy(in[0].transpose(0, 1), targets);
      },
      {random_leaf({5, 5}, 20)}));
}

// ---- attention ------------------------------------------------------------------------------

namespace {
void check_attention(const Shape& q, const Shape& kv, const ops::AttentionOptions& options,
                     uint64_t seed) {
  EXPECT_TRUE(gradcheck(
      [=](const std::vector<Tensor>& in) { return ops::attention(in[0], in[1], in[2], options); },
      {random_leaf(q, seed), random_leaf(kv, seed + 1), random_leaf(kv, seed + 2)}));
}
}  // namespace

TEST(GradcheckAttention, CausalAndNonCausalGqa) {
  for (bool causal : {true, false}) {
    SCOPED_TRACE(causal ? "causal" : "non-causal");
    ops::AttentionOptions options;
    options.causal = causal;
    check_attention({1, 4, 3, 2}, {1, 2, 3, 2}, options, 21);  // GQA H=4, Hkv=2
    check_attention({2, 2, 3, 2}, {2, 2, 3, 2}, options, 24);  // H = Hkv, B = 2
  }
}

TEST(GradcheckAttention, FewerQueriesThanKeysDefaultPositions) {
  // T=2 < S=4: queries sit at positions 2, 3 and see keys 0..2 and 0..3.
  check_attention({1, 2, 2, 3}, {1, 1, 4, 3}, {}, 27);
  ops::AttentionOptions options;
  options.causal = false;
  check_attention({1, 2, 2, 3}, {1, 1, 4, 3}, options, 30);
}

TEST(GradcheckAttention, ExplicitPositionsAndScale) {
  ops::AttentionOptions options;
  options.q_positions = ids({1, 3}, {2});
  options.k_positions = ids({3, 0, 2, 1}, {4}, DType::I32);  // keys out of order
  check_attention({1, 2, 2, 2}, {1, 2, 4, 2}, options, 33);
  options.scale = 0.7;
  check_attention({1, 2, 2, 2}, {1, 2, 4, 2}, options, 36);
  // Query 0 precedes every key: its output is 0 and sends no gradient anywhere.
  options.q_positions = ids({-1, 2}, {2});
  options.k_positions = Tensor();
  check_attention({1, 2, 2, 2}, {1, 1, 3, 2}, options, 39);
}

TEST(GradcheckAttention, NonContiguousInputs) {
  // q, k, v (B, T, H, D) transposed to (B, H, T, D), as a model's projections are.
  EXPECT_TRUE(gradcheck(
      [](const std::vector<Tensor>& in) {
        return ops::attention(in[0].transpose(1, 2), in[1].transpose(1, 2), in[2].transpose(1, 2));
      },
      {random_leaf({1, 3, 4, 2}, 39), random_leaf({1, 3, 2, 2}, 40),
       random_leaf({1, 3, 2, 2}, 41)}));
}

// ---- cast, concat, index_select
// -------------------------------------------------------------------

TEST(GradcheckTensorOps, CastIdentityF64) {
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& in) { return ops::cast(in[0], DType::F64); },
                        {random_leaf({2, 3}, 42)}));
}

TEST(GradcheckTensorOps, CastBackwardReturnsSourceDtype) {
  // F64 → F32: the gradient arrives in F32 and is cast back to F64.
  Tensor x = random_leaf({2, 3}, 43);
  Tensor y = ops::cast(x, DType::F32);
  ASSERT_EQ(y.dtype(), DType::F32);
  ops::sum_all(ops::scale(y, 2.0)).backward();
  ASSERT_TRUE(x.grad().defined());
  EXPECT_EQ(x.grad().dtype(), DType::F64);
  EXPECT_TRUE(microllm::testing::optest::all_close(x.grad(), std::vector<double>(6, 2.0), 0.0));
  // F32 → BF16: the F32 leaf receives an F32 gradient.
  Tensor w = Tensor::ones({4}, DType::F32).set_requires_grad(true);
  ops::sum_all(ops::cast(w, DType::BF16)).backward();
  ASSERT_TRUE(w.grad().defined());
  EXPECT_EQ(w.grad().dtype(), DType::F32);
  EXPECT_TRUE(microllm::testing::optest::all_close(w.grad(), std::vector<double>(4, 1.0), 0.0));
  // To an integer dtype: no graph.
  EXPECT_FALSE(ops::cast(x, DType::I64).requires_grad());
}

TEST(GradcheckTensorOps, ConcatSeveralInputsMiddleDim) {
  EXPECT_TRUE(gradcheck(
      [](const std::vector<Tensor>& in) {
        return ops::concat({in[0], in[1], in[2]}, 1);
      },
      {random_leaf({2, 1, 3}, 44), random_leaf({2, 3, 3}, 45), random_leaf({2, 2, 3}, 46)}));
  // Last dim via -1, an input used twice, one input without a gradient.
  Tensor frozen = random_leaf({2, 2}, 47).set_requires_grad(false);
  EXPECT_TRUE(gradcheck(
      [](const std::vector<Tensor>& in) {
        return ops::concat({in[0], in[1], in[0]}, -1);
      },
      {random_leaf({2, 3}, 48), frozen}));
}

TEST(GradcheckTensorOps, IndexSelectRepeatedIndices) {
  const Tensor index = ids({2, 0, 2, 3, 2}, {5});
  EXPECT_TRUE(
      gradcheck([=](const std::vector<Tensor>& in) { return ops::index_select(in[0], 0, index); },
                {random_leaf({4, 3}, 49)}));
  const Tensor index32 = ids({1, 1, 0}, {3}, DType::I32);
  EXPECT_TRUE(
      gradcheck([=](const std::vector<Tensor>& in) { return ops::index_select(in[0], 1, index32); },
                {random_leaf({2, 3, 2}, 50)}));
  EXPECT_TRUE(gradcheck(
      [=](const std::vector<Tensor>& in) { return ops::index_select(in[0], -1, index32); },
      {random_leaf({2, 2, 3}, 51)}));
}

// ---- views (beyond tests/autograd/test_smoke.cpp) ----------------------------------------------

TEST(GradcheckViews, PermuteSqueezeUnsqueeze) {
  EXPECT_TRUE(gradcheck(
      [](const std::vector<Tensor>& in) {
        return ops::mul(in[0].permute({2, 0, 1}), in[1].unsqueeze(0).unsqueeze(-1));
      },
      {random_leaf({2, 3, 4}, 52), random_leaf({2}, 53)}));
  EXPECT_TRUE(gradcheck(
      [](const std::vector<Tensor>& in) { return ops::exp(in[0].squeeze(1).squeeze(-1)); },
      {random_leaf({3, 1, 2, 1}, 54)}));
}

TEST(GradcheckViews, ReshapeViewFlattenNarrowExpand) {
  EXPECT_TRUE(gradcheck(
      [](const std::vector<Tensor>& in) {
        return ops::mul(in[0].view({3, 4}).flatten(), in[0].reshape({12}));  // x used twice
      },
      {random_leaf({2, 6}, 55)}));
  EXPECT_TRUE(gradcheck(
      [](const std::vector<Tensor>& in) {
        return in[0].narrow(1, 1, 2).expand({3, 2, 2, 4}).contiguous();  // a new leading dim
      },
      {random_leaf({2, 4, 4}, 56)}));
  EXPECT_TRUE(gradcheck(
      [](const std::vector<Tensor>& in) {
        return in[0].expand({2, 3, 4}).slice(2, 1, 3).clone();
      },
      {random_leaf({2, 1, 4}, 57)}));
  EXPECT_TRUE(gradcheck(
      [](const std::vector<Tensor>& in) {
        return in[0].transpose(0, 2).reshape({-1, 2});  // reshape of a non-contiguous view copies
      },
      {random_leaf({2, 3, 2}, 58)}));
}
