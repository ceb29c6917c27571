// Shared by the CPU and CUDA activation tests: swiglu over the two halves of one (…, 2F)
// matrix, split as the joined gate/up projection is, against swiglu over dense copies of the
// halves on the same device.
#pragma once

#include <gtest/gtest.h>

#include <vector>

#include "microllm/ops/ops.h"
#include "ops/op_test_util.h"

namespace microllm::testing {

// values (…, 2F) and dy (…, F) of one dtype and device: the value and both gradients of the
// split halves' swiglu hold the bits of the dense copies'.
inline ::testing::AssertionResult swiglu_halves_match_dense_copies(const Tensor& values,
                                                                   const Tensor& dy) {
  using optest::same_bits;
  const int64_t last = values.dim() - 1, F = values.size(last) / 2;
  Tensor joined = values.detach().clone();  // (…, 2F)
  joined.set_requires_grad(true);
  Tensor gate = values.detach().narrow(last, 0, F).contiguous();  // (…, F)
  Tensor up = values.detach().narrow(last, F, F).contiguous();    // (…, F)
  gate.set_requires_grad(true);
  up.set_requires_grad(true);
  const std::vector<Tensor> halves = ops::split(joined, last, {F, F});
  const Tensor got = ops::swiglu(halves[0], halves[1]);  // (…, F)
  const Tensor want = ops::swiglu(gate, up);             // (…, F)
  got.backward(dy);
  want.backward(dy);
  if (auto r = same_bits(got, want); !r) return r << " (value)";
  if (auto r = same_bits(joined.grad().narrow(last, 0, F).contiguous(), gate.grad()); !r)
    return r << " (gradient of gate)";
  if (auto r = same_bits(joined.grad().narrow(last, F, F).contiguous(), up.grad()); !r)
    return r << " (gradient of up)";
  return ::testing::AssertionSuccess();
}

}  // namespace microllm::testing
