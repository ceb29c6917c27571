// Error reporting: microllm::Error carries the failing operator in op() and a message that
// names the shapes, dtypes, devices or ids involved (STYLE.md, "Errors"). Each test checks
// the exception type, the op tag and the message fragments, not just that something threw.
#include <gtest/gtest.h>

#include <cstdint>
#include <stdexcept>
#include <vector>

#include "core/expect_error.h"
#include "microllm/autograd/node.h"
#include "microllm/core/random.h"
#include "microllm/core/tensor.h"
#include "microllm/ops/ops.h"

using namespace microllm;
using microllm::testing::throws_error;

namespace {

Tensor ids(std::vector<int64_t> values, DType dtype = DType::I64) {
  const int64_t n = static_cast<int64_t>(values.size());
  return Tensor::from_vector(values, {n}, dtype);
}

}  // namespace

// ---- the Error type and the check macros ------------------------------------------------

TEST(Errors, ErrorFormatsOpAndMessage) {
  const Error e("matmul", "inner dimensions differ");
  EXPECT_EQ(e.op(), "matmul");
  EXPECT_STREQ(e.what(), "matmul: inner dimensions differ");
  const Error bare("", "no op");
  EXPECT_EQ(bare.op(), "");
  EXPECT_STREQ(bare.what(), "no op");
  // It is a std::runtime_error, so generic handlers (CLI, server) catch it.
  const std::runtime_error& base = e;
  EXPECT_STREQ(base.what(), "matmul: inner dimensions differ");
}

TEST(Errors, CheckMacroStreamsEveryPart) {
  EXPECT_NO_THROW(MICROLLM_CHECK(1 + 1 == 2, "arith", "never"));
  const Shape shape{2, 3};
  EXPECT_TRUE(throws_error(
      [&] {
        MICROLLM_CHECK(false, "demo", "got ", shape_str(shape), " of ", DType::BF16, " x", 7);
      },
      "demo", {"demo: got (2, 3) of bf16 x7"}));
  EXPECT_TRUE(throws_error([] { MICROLLM_FAIL("demo", "always ", 1.5); }, "demo", {"always 1.5"}));
}

// ---- operator argument errors ------------------------------------------------------------

TEST(Errors, AddShapeMismatchNamesOpAndShapes) {
  Tensor a = Tensor::zeros({2, 3});  // (2, 3)
  Tensor b = Tensor::zeros({4, 5});  // (4, 5)
  EXPECT_TRUE(throws_error([&] { ops::add(a, b); }, "add", {"(2, 3)", "(4, 5)"}));
  EXPECT_TRUE(throws_error([&] { ops::mul(b, a); }, "mul", {"(4, 5)", "(2, 3)"}));
}

TEST(Errors, MatmulInnerDimMismatch) {
  Tensor a = Tensor::zeros({2, 3});  // (M, K) = (2, 3)
  Tensor b = Tensor::zeros({4, 5});  // (K, N) = (4, 5)
  EXPECT_TRUE(throws_error([&] { ops::matmul(a, b); }, "matmul",
                           {"inner", "(2, 3)", "(4, 5)", "K=3", "K=4"}));
  // With trans_b, b (5, 4) is read as (4, 5): K=4 still differs from a's 3.
  EXPECT_TRUE(throws_error(
      [&] {
        ops::matmul(a, Tensor::zeros({5, 4}), false, true);
      },
      "matmul", {"transposed", "K=3", "K=4"}));
  EXPECT_TRUE(throws_error([&] { ops::matmul(Tensor::zeros({2}), b); }, "matmul", {"rank"}));
}

TEST(Errors, DtypeMismatchNamesBothDtypes) {
  Tensor a = Tensor::zeros({2, 3}, DType::F32);
  Tensor b = Tensor::zeros({2, 3}, DType::F64);
  EXPECT_TRUE(throws_error([&] { ops::add(a, b); }, "add", {"f32", "f64", "different dtypes"}));
  EXPECT_TRUE(throws_error([&] { ops::matmul(a, b.transpose(0, 1)); }, "matmul", {"f32", "f64"}));
  // Integer tensors are not accepted by floating operators; the message names the dtype.
  Tensor i = Tensor::zeros({2, 3}, DType::I32);
  EXPECT_TRUE(throws_error([&] { ops::add(i, i); }, "add", {"i32"}));
}

TEST(Errors, DeviceParse) {
  EXPECT_TRUE(throws_error([] { Device::parse("gpu"); }, "device", {"'gpu'", "cuda:N"}));
  EXPECT_TRUE(throws_error([] { Device::parse("cuda:"); }, "device", {"'cuda:'"}));
  EXPECT_TRUE(throws_error([] { Device::parse("cuda:-1"); }, "device", {"'cuda:-1'"}));
  EXPECT_TRUE(throws_error([] { Device::parse("cuda:1x"); }, "device", {"'cuda:1x'"}));
  EXPECT_TRUE(throws_error([] { Device::parse("CPU"); }, "device", {"'CPU'"}));
  // The accepted spellings parse to what they say.
  EXPECT_EQ(Device::parse("cpu"), Device::cpu());
  EXPECT_EQ(Device::parse("cuda"), Device::cuda(0));
  EXPECT_EQ(Device::parse("cuda:3"), Device::cuda(3));
  EXPECT_EQ(Device::parse("cuda:3").str(), "cuda:3");
}

#ifndef MICROLLM_WITH_CUDA
TEST(Errors, CudaTensorInCpuOnlyBuild) {
  EXPECT_TRUE(throws_error(
      [] {
        Tensor::empty({2, 3}, DType::F32, Device::cuda(0));
      },
      "device", {"cuda:0", "without CUDA", "MICROLLM_WITH_CUDA"}));
  Tensor host = Tensor::ones({2});
  EXPECT_TRUE(throws_error([&] { host.to(Device::cuda(1)); }, "device", {"cuda:1", "CUDA"}));
}
#endif

TEST(Errors, EmbeddingIdOutOfRange) {
  Tensor weight = Tensor::zeros({4, 3});  // (V, C) = (4, 3)
  EXPECT_TRUE(throws_error(
      [&] {
        ops::embedding(weight, ids({1, 7, 2}));
      },
      "embedding", {"id 7", "position 1", "[0, 4)"}));
  EXPECT_TRUE(throws_error([&] { ops::embedding(weight, ids({-1}, DType::I32)); }, "embedding",
                           {"id -1", "[0, 4)"}));
  // Float ids are rejected by dtype, not silently truncated.
  EXPECT_TRUE(throws_error([&] { ops::embedding(weight, Tensor::zeros({2})); }, "embedding",
                           {"ids", "f32"}));
}

TEST(Errors, CrossEntropyTargetOutOfRange) {
  Tensor logits = Tensor::zeros({2, 3});  // (N, V) = (2, 3)
  EXPECT_TRUE(throws_error(
      [&] {
        ops::cross_entropy(logits, ids({0, 5}));
      },
      "cross_entropy", {"target 5", "row 1", "[0, 3)"}));
  // A negative target other than ignore_index is out of range too.
  EXPECT_TRUE(throws_error(
      [&] {
        ops::cross_entropy(logits, ids({-1, 0}));
      },
      "cross_entropy", {"target -1", "row 0"}));
  EXPECT_NO_THROW(ops::cross_entropy(logits, ids({-100, 2})));
  EXPECT_TRUE(throws_error(
      [&] {
        ops::cross_entropy(logits, ids({0, 1, 2}));
      },
      "cross_entropy", {"(2)", "(3,)"}));
}

TEST(Errors, IndexSelectOutOfRange) {
  Tensor x = Tensor::zeros({3, 2});  // (3, 2)
  EXPECT_TRUE(throws_error(
      [&] {
        ops::index_select(x, 0, ids({0, 3}));
      },
      "index_select", {"index 3", "position 1", "[0, 3)"}));
  EXPECT_TRUE(throws_error([&] { ops::index_select(x, 1, ids({2})); }, "index_select",
                           {"index 2", "[0, 2)"}));
}

TEST(Errors, AttentionHeadsNotMultipleOfKvHeads) {
  Tensor q = Tensor::zeros({1, 3, 2, 4});  // (B, H, T, D) with H = 3
  Tensor k = Tensor::zeros({1, 2, 2, 4});  // (B, Hkv, S, D) with Hkv = 2
  EXPECT_TRUE(throws_error([&] { ops::attention(q, k, k); }, "attention",
                           {"query heads 3", "KV heads 2", "(1, 3, 2, 4)", "(1, 2, 2, 4)"}));
  // Mismatched head dims are named too.
  Tensor k5 = Tensor::zeros({1, 3, 2, 5});  // D = 5 ≠ 4
  EXPECT_TRUE(throws_error([&] { ops::attention(q, k5, k5); }, "attention", {"(1, 3, 2, 5)"}));
}

TEST(Errors, RmsNormWeightShapeMismatch) {
  Tensor x = Tensor::zeros({2, 3});  // (T, C) = (2, 3)
  Tensor w = Tensor::ones({4});      // (4) ≠ (C)
  EXPECT_TRUE(throws_error([&] { ops::rms_norm(x, w, 1e-6); }, "rms_norm", {"(2, 3)", "(4,)"}));
  EXPECT_TRUE(
      throws_error([&] { ops::rms_norm(x, Tensor::ones({3}), -1.0); }, "rms_norm", {"eps"}));
}

// ---- autograd errors ---------------------------------------------------------------------

TEST(Errors, BackwardWithoutRequiresGrad) {
  Tensor x = Tensor::ones({2});
  Tensor y = ops::sum_all(x);  // nothing requires a gradient: no graph
  EXPECT_TRUE(throws_error([&] { y.backward(); }, "backward", {"does not require"}));
  // A non-scalar output needs an explicit gradient.
  Tensor leaf = Tensor::ones({2}, DType::F64);
  leaf.set_requires_grad(true);
  Tensor z = ops::scale(leaf, 2.0);
  EXPECT_TRUE(throws_error([&] { z.backward(); }, "backward", {"non-scalar", "(2,)"}));
  // A gradient of the wrong shape is named.
  EXPECT_TRUE(throws_error([&] { z.backward(Tensor::ones({3}, DType::F64)); }, "backward",
                           {"(3,)", "(2,)"}));
}

TEST(Errors, BackwardTwiceThroughSameGraph) {
  Tensor x = Tensor::from_vector(std::vector<double>{1, 2, 3}, {3}, DType::F64);
  x.set_requires_grad(true);
  Tensor loss = ops::sum_all(ops::mul(x, x));
  loss.backward();
  // The first pass really ran: d(Σx²)/dx = 2x.
  EXPECT_EQ(x.grad().to_vector_f64(), (std::vector<double>{2, 4, 6}));
  EXPECT_TRUE(throws_error([&] { loss.backward(); }, "backward", {"already used"}));
}

TEST(Errors, RequiresGradRules) {
  Tensor i = Tensor::zeros({2}, DType::I64);
  EXPECT_TRUE(throws_error([&] { i.set_requires_grad(true); }, "Tensor::set_requires_grad",
                           {"floating", "i64"}));
  Tensor leaf = Tensor::ones({2}, DType::F64);
  leaf.set_requires_grad(true);
  Tensor non_leaf = ops::scale(leaf, 3.0);
  EXPECT_TRUE(throws_error([&] { non_leaf.set_requires_grad(false); }, "Tensor::set_requires_grad",
                           {"leaf"}));
}

// ---- tensor misuse -----------------------------------------------------------------------

TEST(Errors, UndefinedTensorAccess) {
  Tensor t;
  EXPECT_FALSE(t.defined());
  EXPECT_EQ(t.describe(), "undefined");
  EXPECT_FALSE(t.requires_grad());
  EXPECT_TRUE(throws_error([&] { (void)t.shape(); }, "Tensor::shape", {"undefined"}));
  EXPECT_TRUE(throws_error([&] { (void)t.dtype(); }, "Tensor::dtype", {"undefined"}));
  EXPECT_TRUE(throws_error([&] { (void)t.device(); }, "Tensor::device", {"undefined"}));
  EXPECT_TRUE(throws_error([&] { (void)t.storage(); }, "Tensor::storage", {"undefined"}));
  EXPECT_TRUE(throws_error([&] { (void)t.raw_data(); }, "Tensor::raw_data", {"undefined"}));
  EXPECT_TRUE(throws_error([&] { (void)t.numel(); }, "", {"undefined"}));
  EXPECT_TRUE(throws_error([&] { (void)t.reshape({1}); }, "", {"undefined"}));
  EXPECT_TRUE(throws_error([&] { t.backward(); }, "Tensor::backward", {"undefined"}));
  EXPECT_TRUE(throws_error([&] { ops::add(t, Tensor::ones({1})); }, "add", {"'a'", "undefined"}));
  Tensor dst = Tensor::zeros({1});
  EXPECT_TRUE(throws_error([&] { dst.copy_from(t); }, "copy", {"undefined"}));
  // Regression: these two dereferenced the null impl (a crash) instead of throwing.
  EXPECT_TRUE(throws_error([&] { (void)t.is_leaf(); }, "Tensor::is_leaf", {"undefined"}));
  EXPECT_TRUE(throws_error([&] { (void)t.output_nr(); }, "Tensor::output_nr", {"undefined"}));
}

TEST(Errors, TensorAccessorsAndFactories) {
  Tensor t = Tensor::zeros({2, 3});
  EXPECT_TRUE(throws_error([&] { (void)t.size(2); }, "Tensor::size", {"dimension 2", "rank 2"}));
  EXPECT_TRUE(throws_error([&] { (void)t.stride(-3); }, "Tensor::stride", {"dimension -3"}));
  EXPECT_TRUE(throws_error([&] { (void)t.item(); }, "Tensor::item", {"one element", "(2, 3)"}));
  EXPECT_TRUE(throws_error([&] { (void)t.data<double>(); }, "Tensor::data",
                           {"f32(2, 3)", "wrong element type"}));
  EXPECT_TRUE(throws_error([&] { (void)t.to_vector_i64(); }, "Tensor::to_vector_i64", {"f32"}));
  EXPECT_TRUE(throws_error([] { Tensor::empty({2, -1}); }, "Tensor::empty", {"(2, -1)"}));
  // Regression: a negative length escaped as std::length_error from std::vector.
  EXPECT_TRUE(throws_error([] { Tensor::arange(-1); }, "Tensor::arange", {"-1"}));
  EXPECT_EQ(Tensor::arange(0).numel(), 0);
  EXPECT_TRUE(throws_error(
      [] {
        Tensor::from_vector(std::vector<float>{1, 2, 3}, {2, 2});
      },
      "Tensor::from_vector", {"3 values", "(2, 2)"}));
  EXPECT_TRUE(throws_error(
      [&] {
        t.copy_from(Tensor::zeros({3, 2}));
      },
      "copy", {"(2, 3)", "(3, 2)"}));
}

TEST(Errors, BroadcastAndDimHelpers) {
  EXPECT_TRUE(throws_error(
      [] {
        broadcast_shapes({2, 3}, {3, 2}, "probe");
      },
      "probe", {"(2, 3)", "(3, 2)", "dimension 0: 2 vs 3"}));
  EXPECT_EQ(broadcast_shapes({4, 1, 3}, {2, 1}, "probe"), (Shape{4, 2, 3}));
  EXPECT_TRUE(
      throws_error([] { normalize_dim(3, 3, "probe"); }, "probe", {"dimension 3", "rank 3"}));
  EXPECT_TRUE(throws_error([] { normalize_dim(-4, 3, "probe"); }, "probe", {"dimension -4"}));
  EXPECT_EQ(normalize_dim(-1, 3, "probe"), 2);
  EXPECT_EQ(normalize_dim(-3, 3, "probe"), 0);
  EXPECT_EQ(shape_str({}), "()");
  EXPECT_EQ(shape_str({5}), "(5,)");
  EXPECT_EQ(shape_str({2, 3, 4}), "(2, 3, 4)");
}

TEST(Errors, RandintEmptyRange) {
  Generator gen(1);
  EXPECT_TRUE(throws_error([&] { randint({4}, 3, 3, gen); }, "randint", {"[3, 3)"}));
}
