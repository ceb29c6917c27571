// Reductions along one dimension (sum, mean, max, argmax) and over all elements.
// The CPU accumulates in F64 for every input dtype.
#pragma once

#include "microllm/core/tensor.h"

namespace microllm::ops {

Tensor sum(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor mean(const Tensor& x, int64_t dim, bool keepdim = false);
// Largest value along `dim`; the gradient goes to the first position holding it.
Tensor max(const Tensor& x, int64_t dim, bool keepdim = false);
// Index (I64) of the first largest value along `dim`; not differentiable.
Tensor argmax(const Tensor& x, int64_t dim, bool keepdim = false);

Tensor sum_all(const Tensor& x);   // shape ()
Tensor mean_all(const Tensor& x);  // shape ()

// Sums `grad` over the dimensions that broadcasting expanded so it has `shape` again.
Tensor sum_to_shape(const Tensor& grad, const Shape& shape);

}  // namespace microllm::ops
