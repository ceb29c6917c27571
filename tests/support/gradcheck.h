// Finite-difference gradient checking in F64.
//
// gradcheck(fn, inputs) compares the gradient autograd computes for
// L = Σ out ⊙ W (W fixed random weights, so every output element matters) with central
// differences (L(x + ε) − L(x − ε)) / 2ε for every element of every input that requires a
// gradient. Inputs must be dense F64 CPU leaves.
#pragma once

#include <functional>
#include <vector>

#include <gtest/gtest.h>

#include "microllm/core/tensor.h"

namespace microllm::testing {

struct GradcheckOptions {
  double eps = 1e-6;
  double atol = 1e-6;
  double rtol = 1e-5;
  uint64_t seed = 1234;
};

using GradcheckFn = std::function<Tensor(const std::vector<Tensor>&)>;

::testing::AssertionResult gradcheck(const GradcheckFn& fn, std::vector<Tensor> inputs,
                                     const GradcheckOptions& options = {});

// A dense F64 leaf of normal samples that requires a gradient.
Tensor random_leaf(const Shape& shape, uint64_t seed, double mean = 0.0, double std = 1.0);

}  // namespace microllm::testing
