// Structural operators: dtype cast, concatenation, index-select.
#pragma once

#include <vector>

#include "microllm/core/tensor.h"

namespace microllm::ops {

// Converts to `dtype` (round to nearest even; FP8 saturates). Differentiable between
// floating dtypes: the gradient is cast back.
Tensor cast(const Tensor& x, DType dtype);
// Joins tensors of equal shape except along `dim`.
Tensor concat(const std::vector<Tensor>& tensors, int64_t dim);
// Picks entries along `dim` by integer `index` (K): out has size K along `dim`.
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index);

}  // namespace microllm::ops
