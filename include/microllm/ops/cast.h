// Dtype cast: a converting copy (round to nearest even; FP8 saturates).
#pragma once

#include "microllm/core/tensor.h"

namespace microllm::ops {

// Converts to `dtype`; always a new tensor, even when the dtype is unchanged. Differentiable
// between floating dtypes: the gradient is cast back. Tensor::to(dtype) is the same
// conversion without the copy when the dtype already matches.
Tensor cast(const Tensor& x, DType dtype);

}  // namespace microllm::ops
