// BF16 inputs across the CPU operators (elementwise, softmax / log_softmax, rms_norm,
// silu, swiglu, reductions, matmul, linear, rope, attention, cross_entropy): BF16 outputs
// within one bf16 ulp of the same op on the same values in F32, and cross_entropy's F32
// loss dtype with its gradient reaching BF16 logits in BF16.
#include <gtest/gtest.h>

#include <functional>
#include <vector>

#include "microllm/ops/ops.h"
#include "ops/op_test_util.h"

using namespace microllm;
using microllm::testing::optest::all_close;
using microllm::testing::optest::ids;
using microllm::testing::optest::randn_tensor;

namespace {
// op on BF16 inputs gives BF16 values within bf16 rounding of op on the same values in F32.
void expect_bf16_close(const std::vector<Tensor>& inputs_f32,
                       const std::function<Tensor(const std::vector<Tensor>&)>& op, double tol) {
  std::vector<Tensor> bf16, widened;
  for (const Tensor& t : inputs_f32) {
    bf16.push_back(t.to(DType::BF16));
    widened.push_back(bf16.back().to(DType::F32));  // the exact values the BF16 run sees
  }
  const Tensor got = op(bf16);
  const Tensor want = op(widened);
  EXPECT_EQ(got.dtype(), DType::BF16);
  EXPECT_EQ(got.shape(), want.shape());
  EXPECT_TRUE(all_close(got, want.to_vector_f64(), tol, 4e-3));  // one bf16 ulp
}
}  // namespace

TEST(OpsForward, Bf16InputsGiveBf16OutputsNearF32) {
  const Tensor a = randn_tensor({3, 8}, 14, DType::F32);
  const Tensor b = randn_tensor({8}, 15, DType::F32);
  const Tensor w = randn_tensor({5, 8}, 16, DType::F32);
  expect_bf16_close(
      {a, b}, [](const auto& in) { return ops::add(in[0], in[1]); }, 1e-6);
  expect_bf16_close(
      {a, b}, [](const auto& in) { return ops::mul(in[0], in[1]); }, 1e-6);
  expect_bf16_close(
      {a}, [](const auto& in) { return ops::exp(in[0]); }, 1e-6);
  expect_bf16_close(
      {a}, [](const auto& in) { return ops::softmax(in[0], -1); }, 1e-6);
  expect_bf16_close(
      {a}, [](const auto& in) { return ops::log_softmax(in[0], 0); }, 1e-6);
  expect_bf16_close(
      {a, b}, [](const auto& in) { return ops::rms_norm(in[0], in[1], 1e-6); }, 1e-6);
  expect_bf16_close(
      {a}, [](const auto& in) { return ops::silu(in[0]); }, 1e-6);
  expect_bf16_close(
      {a, a}, [](const auto& in) { return ops::swiglu(in[0], in[1]); }, 1e-6);
  expect_bf16_close(
      {a}, [](const auto& in) { return ops::sum(in[0], 1); }, 1e-6);
  expect_bf16_close(
      {a}, [](const auto& in) { return ops::max(in[0], 0); }, 0.0);
  expect_bf16_close(
      {a, w}, [](const auto& in) { return ops::matmul(in[0], in[1], false, true); }, 1e-6);
  expect_bf16_close(
      {a, w}, [](const auto& in) { return ops::linear(in[0], in[1]); }, 1e-6);
  const Tensor x = randn_tensor({1, 2, 3, 8}, 17, DType::F32);
  const Tensor pos = ids({1, 2, 3}, {3});
  expect_bf16_close(
      {x}, [&](const auto& in) { return ops::rope(in[0], pos, ops::rope_inv_freq(8, 1e4)); }, 1e-6);
  expect_bf16_close(
      {x, x.narrow(1, 0, 1), x.narrow(1, 1, 1)},
      [](const auto& in) { return ops::attention(in[0], in[1], in[2]); }, 1e-6);
  // A BF16 cross-entropy loss is a BF16 scalar.
  const Tensor loss = ops::cross_entropy(a.to(DType::BF16), ids({0, 7, 3}, {3}));
  EXPECT_EQ(loss.dtype(), DType::BF16);
  EXPECT_NEAR(loss.item(),
              ops::cross_entropy(a.to(DType::BF16).to(DType::F32), ids({0, 7, 3}, {3})).item(),
              2e-2);
  // Asked for in F32, the same loss keeps the F32 value the kernel computed, and its
  // gradient reaches the BF16 logits in BF16.
  Tensor logits = a.to(DType::BF16);
  logits.set_requires_grad(true);
  const Tensor loss32 = ops::cross_entropy(logits, ids({0, 7, 3}, {3}), -100, DType::F32);
  EXPECT_EQ(loss32.dtype(), DType::F32);
  EXPECT_NEAR(loss32.item(),
              ops::cross_entropy(a.to(DType::BF16).to(DType::F32), ids({0, 7, 3}, {3})).item(),
              1e-6);
  loss32.backward();
  ASSERT_TRUE(logits.grad().defined());
  EXPECT_EQ(logits.grad().dtype(), DType::BF16);
  EXPECT_ERROR(ops::cross_entropy(a, ids({0, 7, 3}, {3}), -100, DType::I64), "cross_entropy",
               {"loss dtype"});
}
