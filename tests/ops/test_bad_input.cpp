// Error paths of the CPU operators: mismatched shapes, dtypes and ranks, out-of-range ids,
// empty tensors an op cannot work on, bad GQA grouping, odd head dims and wrong position
// shapes. Every check asserts the microllm::Error names the op (Error::op()) and that its
// message carries the offending shape, dtype or value.
#include <gtest/gtest.h>

#include "microllm/ops/ops.h"
#include "ops/op_test_util.h"

using namespace microllm;
using microllm::testing::optest::ids;

namespace {
Tensor f32(const Shape& shape) { return Tensor::zeros(shape, DType::F32); }
Tensor f64(const Shape& shape) { return Tensor::zeros(shape, DType::F64); }
Tensor i64(const Shape& shape) { return Tensor::zeros(shape, DType::I64); }
}  // namespace

TEST(BadInput, Elementwise) {
  EXPECT_ERROR(ops::add(f32({2, 3}), f32({4})), "add", {"(2, 3)", "(4,)", "cannot be broadcast"});
  EXPECT_ERROR(ops::mul(f32({2, 3, 4}), f32({3, 2})), "mul", {"(2, 3, 4)", "(3, 2)"});
  EXPECT_ERROR(ops::sub(f32({2, 3}), f64({2, 3})), "sub",
               {"f32(2, 3)", "f64(2, 3)", "different dtypes"});
  EXPECT_ERROR(ops::div(i64({3}), i64({3})), "div", {"'a'", "i64(3,)"});
  EXPECT_ERROR(ops::add(f32({3}), Tensor()), "add", {"'b'", "undefined"});
  EXPECT_ERROR(ops::exp(i64({2})), "exp", {"i64(2,)"});
  EXPECT_ERROR(ops::log(Tensor::zeros({2}, DType::Bool)), "log", {"bool(2,)"});
  EXPECT_ERROR(ops::pow(Tensor::zeros({2}, DType::I32), 2.0), "pow", {"i32(2,)"});
  EXPECT_ERROR(ops::scale(Tensor::zeros({2}, DType::U8), 2.0), "scale", {"u8(2,)"});
}

TEST(BadInput, Matmul) {
  EXPECT_ERROR(ops::matmul(f32({2, 3}), f32({4, 5})), "matmul", {"(2, 3)", "(4, 5)", "K=3", "K=4"});
  EXPECT_ERROR(ops::matmul(f32({2, 3}), f32({5, 4}), false, true), "matmul",
               {"(5, 4)", "transposed", "K=3", "K=4"});
  EXPECT_ERROR(ops::matmul(f32({3}), f32({3, 2})), "matmul", {"rank 2 or 3", "f32(3,)"});
  EXPECT_ERROR(ops::matmul(f32({1, 2, 3, 4}), f32({4, 2})), "matmul", {"f32(1, 2, 3, 4)"});
  EXPECT_ERROR(ops::matmul(f32({2, 3, 4}), f32({3, 4, 5})), "matmul",
               {"batch", "(2, 3, 4)", "(3, 4, 5)"});
  EXPECT_ERROR(ops::matmul(f32({2, 3}), f64({3, 2})), "matmul", {"f32(2, 3)", "f64(3, 2)"});
  EXPECT_ERROR(ops::matmul(i64({2, 3}), i64({3, 2})), "matmul", {"i64(2, 3)"});
  EXPECT_ERROR(ops::matmul_naive(f32({2, 3}), f32({2, 3})), "matmul_naive",
               {"(2, 3)", "K=3", "K=2"});
}

TEST(BadInput, Linear) {
  EXPECT_ERROR(ops::linear(f32({2, 3}), f32({4, 5})), "linear", {"f32(2, 3)", "f32(4, 5)"});
  EXPECT_ERROR(ops::linear(f32({2, 5}), f32({5})), "linear", {"f32(5,)"});
  EXPECT_ERROR(ops::linear(f32({2, 5}), f32({4, 5}), f32({3})), "linear",
               {"bias", "(4)", "f32(3,)"});
  EXPECT_ERROR(ops::linear(f32({2, 5}), f64({4, 5})), "linear", {"f32(2, 5)", "f64(4, 5)"});
  EXPECT_ERROR(ops::linear(f32({2, 5}), f32({4, 5}), f64({4})), "linear", {"f32(2, 5)", "f64(4,)"});
}

TEST(BadInput, Reductions) {
  EXPECT_ERROR(ops::sum(f32({2, 3}), 2), "sum", {"dimension 2", "rank 2"});
  EXPECT_ERROR(ops::max(f32({2, 3}), -3), "max", {"dimension -3", "rank 2"});
  EXPECT_ERROR(ops::max(f32({2, 0}), 1), "max", {"empty dimension 1", "f32(2, 0)"});
  EXPECT_ERROR(ops::argmax(f32({0, 4}), 0), "argmax", {"empty dimension 0", "f32(0, 4)"});
  EXPECT_ERROR(ops::mean(f32({2, 0}), 1), "mean", {"empty dimension 1", "f32(2, 0)"});
  EXPECT_ERROR(ops::mean_all(f32({0, 3})), "mean_all", {"empty", "f32(0, 3)"});
  EXPECT_ERROR(ops::sum(i64({2, 3}), 0), "sum", {"i64(2, 3)"});
  EXPECT_ERROR(ops::sum_all(Tensor()), "sum_all", {"undefined"});
  EXPECT_ERROR(ops::sum_to_shape(f32({2, 3}), {4}), "sum_to_shape", {"(2, 3)", "(4,)"});
}

TEST(BadInput, Softmax) {
  EXPECT_ERROR(ops::softmax(Tensor::scalar(1.0)), "softmax", {"at least one dimension", "f32()"});
  EXPECT_ERROR(ops::log_softmax(f32({2, 3}), 2), "log_softmax", {"dimension 2", "rank 2"});
  EXPECT_ERROR(ops::softmax(i64({2, 3})), "softmax", {"i64(2, 3)"});
}

TEST(BadInput, RmsNorm) {
  EXPECT_ERROR(ops::rms_norm(f32({2, 0}), f32({0}), 1e-6), "rms_norm", {"width 0", "f32(2, 0)"});
  EXPECT_ERROR(ops::rms_norm(f32({2, 4}), f32({3}), 1e-6), "rms_norm", {"f32(2, 4)", "f32(3,)"});
  EXPECT_ERROR(ops::rms_norm(f32({2, 4}), f32({1, 4}), 1e-6), "rms_norm", {"f32(1, 4)"});
  EXPECT_ERROR(ops::rms_norm(f32({2, 4}), f64({4}), 1e-6), "rms_norm", {"f32(2, 4)", "f64(4,)"});
  EXPECT_ERROR(ops::rms_norm(f32({2, 4}), f32({4}), -1.0), "rms_norm", {"eps", "-1"});
  EXPECT_ERROR(ops::rms_norm(Tensor::scalar(1.0), f32({1}), 1e-6), "rms_norm", {"f32()"});
  EXPECT_ERROR(ops::add_rms_norm(f32({2, 4}), f32({3, 4}), f32({4}), 1e-6), "add_rms_norm",
               {"f32(2, 4)", "f32(3, 4)", "differ in shape"});
  EXPECT_ERROR(ops::add_rms_norm(f32({2, 4}), f64({2, 4}), f32({4}), 1e-6), "add_rms_norm",
               {"residual", "f64(2, 4)"});
  EXPECT_ERROR(ops::add_rms_norm(f32({2, 0}), f32({2, 0}), f32({0}), 1e-6), "add_rms_norm",
               {"width 0"});
}

TEST(BadInput, Activations) {
  EXPECT_ERROR(ops::silu(i64({3})), "silu", {"i64(3,)"});
  EXPECT_ERROR(ops::swiglu(f32({2, 3}), f32({3, 2})), "swiglu",
               {"f32(2, 3)", "f32(3, 2)", "differ in shape"});
  EXPECT_ERROR(ops::swiglu(f32({2, 3}), f64({2, 3})), "swiglu", {"f32(2, 3)", "f64(2, 3)"});
  EXPECT_ERROR(ops::swiglu(f32({2, 3}), Tensor()), "swiglu", {"'up'", "undefined"});
}

TEST(BadInput, Rope) {
  const Tensor freq2 = f32({2});
  EXPECT_ERROR(ops::rope(f32({1, 1, 2, 3}), ids({0, 1}, {2}), f32({1})), "rope",
               {"even", "f32(1, 1, 2, 3)"});
  EXPECT_ERROR(ops::rope_inv_freq(3, 10000.0), "rope_inv_freq", {"even", "3"});
  EXPECT_ERROR(ops::rope_inv_freq(0, 10000.0), "rope_inv_freq", {"0"});
  EXPECT_ERROR(ops::rope_inv_freq(4, -1.0), "rope_inv_freq", {"theta", "-1"});
  // positions must be (T) or (B, T).
  EXPECT_ERROR(ops::rope(f32({2, 1, 3, 4}), ids({0, 1, 2, 3}, {4}), freq2), "rope",
               {"positions", "f32(2, 1, 3, 4)", "i64(4,)"});
  EXPECT_ERROR(ops::rope(f32({2, 1, 3, 4}), i64({3, 3}), freq2), "rope",
               {"positions", "i64(3, 3)"});
  EXPECT_ERROR(ops::rope(f32({2, 1, 3, 4}), i64({1, 2, 3}), freq2), "rope",
               {"positions", "i64(1, 2, 3)"});
  EXPECT_ERROR(ops::rope(f32({2, 1, 3, 4}), f32({3}), freq2), "rope", {"'positions'", "f32(3,)"});
  EXPECT_ERROR(ops::rope(f32({1, 3, 4}), i64({3}), freq2), "rope", {"rank 4", "f32(1, 3, 4)"});
  EXPECT_ERROR(ops::rope(f32({1, 1, 3, 4}), i64({3}), f32({3})), "rope",
               {"inv_freq", "(2)", "f32(3,)"});
  EXPECT_ERROR(ops::rope(i64({1, 1, 3, 4}), i64({3}), freq2), "rope", {"'x'", "i64(1, 1, 3, 4)"});
}

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

TEST(BadInput, CrossEntropy) {
  const Tensor logits = f32({2, 4});
  EXPECT_ERROR(ops::cross_entropy(logits, ids({1, 4}, {2})), "cross_entropy",
               {"target 4", "row 1", "[0, 4)"});
  EXPECT_ERROR(ops::cross_entropy(logits, ids({-1, 0}, {2})), "cross_entropy",
               {"target -1", "row 0", "-100"});
  // -100 is only ignored when it is the ignore_index.
  EXPECT_ERROR(ops::cross_entropy(logits, ids({-100, 0}, {2}), 3), "cross_entropy",
               {"target -100"});
  EXPECT_ERROR(ops::cross_entropy(logits, ids({0, 1, 2}, {3})), "cross_entropy",
               {"f32(2, 4)", "i64(3,)"});
  EXPECT_ERROR(ops::cross_entropy(logits, i64({2, 1})), "cross_entropy", {"i64(2, 1)"});
  EXPECT_ERROR(ops::cross_entropy(f32({2, 3, 4}), i64({2})), "cross_entropy",
               {"rank 2", "f32(2, 3, 4)"});
  EXPECT_ERROR(ops::cross_entropy(f32({2, 0}), i64({2})), "cross_entropy",
               {"no classes", "f32(2, 0)"});
  EXPECT_ERROR(ops::cross_entropy(logits, f32({2})), "cross_entropy", {"'targets'", "f32(2,)"});
}

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

TEST(BadInput, Attention) {
  EXPECT_ERROR(ops::attention(f32({1, 3, 2, 4}), f32({1, 2, 2, 4}), f32({1, 2, 2, 4})), "attention",
               {"query heads 3", "KV heads 2", "f32(1, 3, 2, 4)"});
  EXPECT_ERROR(ops::attention(f32({1, 2, 2, 4}), f32({1, 0, 2, 4}), f32({1, 0, 2, 4})), "attention",
               {"KV heads 0"});
  EXPECT_ERROR(ops::attention(f32({1, 2, 2, 4}), f32({1, 1, 2, 5}), f32({1, 1, 2, 5})), "attention",
               {"f32(1, 2, 2, 4)", "f32(1, 1, 2, 5)"});
  EXPECT_ERROR(ops::attention(f32({1, 2, 2, 4}), f32({1, 1, 2, 4}), f32({1, 1, 3, 4})), "attention",
               {"v f32(1, 1, 3, 4)"});
  EXPECT_ERROR(ops::attention(f32({2, 2, 2, 4}), f32({1, 1, 2, 4}), f32({1, 1, 2, 4})), "attention",
               {"f32(2, 2, 2, 4)", "f32(1, 1, 2, 4)"});
  EXPECT_ERROR(ops::attention(f32({2, 2, 4}), f32({1, 1, 2, 4}), f32({1, 1, 2, 4})), "attention",
               {"'q'", "rank 4", "f32(2, 2, 4)"});
  EXPECT_ERROR(ops::attention(f32({1, 2, 2, 4}), f64({1, 1, 2, 4}), f32({1, 1, 2, 4})), "attention",
               {"f32(1, 2, 2, 4)", "f64(1, 1, 2, 4)"});
  EXPECT_ERROR(ops::attention(f32({1, 1, 2, 0}), f32({1, 1, 2, 0}), f32({1, 1, 2, 0})), "attention",
               {"head dimension is 0", "f32(1, 1, 2, 0)"});
  ops::AttentionOptions options;
  options.q_positions = ids({0, 1, 2}, {3});
  EXPECT_ERROR(ops::attention(f32({1, 1, 2, 4}), f32({1, 1, 2, 4}), f32({1, 1, 2, 4}), options),
               "attention", {"q_positions", "(2)", "i64(3,)"});
  options.q_positions = Tensor();
  options.k_positions = f32({2});
  EXPECT_ERROR(ops::attention(f32({1, 1, 2, 4}), f32({1, 1, 2, 4}), f32({1, 1, 2, 4}), options),
               "attention", {"k_positions", "f32(2,)"});
  options.k_positions = i64({1, 2});
  EXPECT_ERROR(ops::attention(f32({1, 1, 2, 4}), f32({1, 1, 2, 4}), f32({1, 1, 2, 4}), options),
               "attention", {"k_positions", "i64(1, 2)"});
}

TEST(BadInput, TensorOps) {
  EXPECT_ERROR(ops::concat({}, 0), "concat", {"at least one"});
  EXPECT_ERROR(ops::concat({f32({2, 3}), f32({3, 3})}, 1), "concat",
               {"tensor 1", "f32(3, 3)", "f32(2, 3)", "dimension 1"});
  EXPECT_ERROR(ops::concat({f32({2, 3}), f32({2, 3, 1})}, 0), "concat", {"f32(2, 3, 1)"});
  EXPECT_ERROR(ops::concat({f32({2, 3}), f64({2, 3})}, 0), "concat", {"f32(2, 3)", "f64(2, 3)"});
  EXPECT_ERROR(ops::concat({f32({2, 3}), f32({2, 3})}, 2), "concat", {"dimension 2", "rank 2"});
  EXPECT_ERROR(ops::cast(Tensor(), DType::F32), "cast", {"'x'", "undefined"});
}
