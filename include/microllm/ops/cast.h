// Dtype cast: a converting copy (round to nearest even; FP8 saturates).
#pragma once

#include "microllm/core/tensor.h"

namespace microllm::ops {

// Converts to `dtype`; always a new tensor, even when the dtype is unchanged. Differentiable
// between floating dtypes: the gradient is cast back. Tensor::to(dtype) is the same
// conversion without the copy when the dtype already matches.
Tensor cast(const Tensor& x, DType dtype);
// The allocation-free form: converts x (any strides, any dtype) into a preallocated dense
// out of x's shape and device; out's dtype is the target. The same conversion as cast; no
// autograd; out must be separate from x.
void cast_out(const Tensor& x, const Tensor& out);

}  // namespace microllm::ops
