// Finite-difference gradient checking (see gradcheck.h).
#include "support/gradcheck.h"

#include <cmath>
#include <sstream>

#include "microllm/autograd/node.h"
#include "microllm/core/random.h"
#include "microllm/ops/elementwise.h"
#include "microllm/ops/reduce.h"

namespace microllm::testing {

Tensor random_leaf(const Shape& shape, uint64_t seed, double mean, double std) {
  Generator gen(seed);
  Tensor t = randn(shape, gen, DType::F64, Device::cpu(), mean, std);
  t.set_requires_grad(true);
  return t;
}

::testing::AssertionResult gradcheck(const GradcheckFn& fn, std::vector<Tensor> inputs,
                                     const GradcheckOptions& options) {
  for (const Tensor& input : inputs)
    if (input.requires_grad() && (input.dtype() != DType::F64 || !input.is_contiguous()))
      return ::testing::AssertionFailure()
             << "gradcheck needs dense F64 inputs, found " << input.describe();

  // Analytic gradients of L = Σ out·W.
  Tensor out = fn(inputs);
  Generator gen(options.seed);
  const Tensor weights = randn(out.shape(), gen, DType::F64);
  for (Tensor& input : inputs) input.zero_grad();
  ops::sum_all(ops::mul(out, weights)).backward();

  auto loss = [&]() {
    autograd::NoGradGuard no_grad;
    return ops::sum_all(ops::mul(fn(inputs), weights)).item();
  };
  std::ostringstream failures;
  int failed = 0;
  for (size_t n = 0; n < inputs.size(); ++n) {
    Tensor& input = inputs[n];
    if (!input.requires_grad()) continue;
    const Tensor grad = input.grad();
    if (!grad.defined())
      return ::testing::AssertionFailure() << "input " << n << " received no gradient";
    const std::vector<double> analytic = grad.to_vector_f64();
    double* x = input.data<double>();
    for (int64_t i = 0; i < input.numel(); ++i) {
      const double saved = x[i];
      x[i] = saved + options.eps;
      const double plus = loss();
      x[i] = saved - options.eps;
      const double minus = loss();
      x[i] = saved;
      const double numeric = (plus - minus) / (2.0 * options.eps);
      const double diff = std::fabs(numeric - analytic[i]);
      if (diff > options.atol + options.rtol * std::fabs(numeric) && failed++ < 8)
        failures << "\n  input " << n << " element " << i << ": analytic " << analytic[i]
                 << ", numeric " << numeric << ", |diff| " << diff;
    }
  }
  if (failed)
    return ::testing::AssertionFailure()
           << failed << " gradient elements differ:" << failures.str();
  return ::testing::AssertionSuccess();
}

}  // namespace microllm::testing
