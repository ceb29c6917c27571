// Shared by the CPU and CUDA tests: add_rms_norm (the sum and its norm in one node, the
// sum's two gradients added by the norm's backward kernel) against its composition
// add → rms_norm, with both outputs feeding a loss: the same bits for both outputs and for
// the gradients of x, residual and weight.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "microllm/core/random.h"
#include "microllm/ops/ops.h"
#include "ops/op_test_util.h"

namespace microllm::testing {

// Σ normed·a + Σ sum·b for fixed random a, b: both outputs receive a gradient.
inline Tensor both_outputs_loss(const Tensor& sum, const Tensor& normed, uint64_t seed) {
  Generator gen(seed);
  std::vector<double> values(static_cast<size_t>(sum.numel()));
  for (double& v : values) v = gen.next_normal();
  const Tensor wa = Tensor::from_vector(values, sum.shape(), DType::F64).to(sum.dtype());
  for (double& v : values) v = gen.next_normal();
  const Tensor wb = Tensor::from_vector(values, sum.shape(), DType::F64).to(sum.dtype());
  return ops::add(ops::sum_all(ops::mul(normed, wa.to(sum.device()))),
                  ops::sum_all(ops::mul(sum, wb.to(sum.device()))));
}

inline ::testing::AssertionResult add_rms_norm_is_its_composition(const Shape& shape, DType dtype,
                                                                  Device device) {
  auto input = [&](uint64_t seed, const Shape& s, double mean) {
    Generator gen(seed);
    std::vector<double> values(static_cast<size_t>(shape_numel(s)));
    for (double& v : values) v = mean + gen.next_normal() * 0.5;
    Tensor t = Tensor::from_vector(values, s, DType::F64).to(dtype).to(device);
    t.set_requires_grad(true);
    return t;
  };
  const int64_t C = shape.back();
  Tensor x = input(1, shape, 0.0), residual = input(2, shape, 0.0), weight = input(3, {C}, 1.0);
  const ops::AddRmsNormResult fused = ops::add_rms_norm(x, residual, weight, 1e-6);
  both_outputs_loss(fused.sum, fused.normed, 4).backward();
  const Tensor fx = x.grad(), fr = residual.grad(), fw = weight.grad();
  x.zero_grad();
  residual.zero_grad();
  weight.zero_grad();
  const Tensor sum = ops::add(x, residual);
  const Tensor normed = ops::rms_norm(sum, weight, 1e-6);
  both_outputs_loss(sum, normed, 4).backward();
  const std::string where = std::string(dtype_name(dtype)) + " on " + device.str();
  const std::pair<const char*, ::testing::AssertionResult> checks[] = {
      {"sum", optest::same_bits(fused.sum, sum)},
      {"normed", optest::same_bits(fused.normed, normed)},
      {"grad x", optest::same_bits(fx, x.grad())},
      {"grad residual", optest::same_bits(fr, residual.grad())},
      {"grad weight", optest::same_bits(fw, weight.grad())}};
  for (const auto& [what, result] : checks)
    if (!result)
      return ::testing::AssertionFailure() << what << ", " << where << ": " << result.message();
  return ::testing::AssertionSuccess();
}

}  // namespace microllm::testing
