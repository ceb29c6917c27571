// Concatenation of tensors along one dimension.
#pragma once

#include <vector>

#include "microllm/core/tensor.h"

namespace microllm::ops {

// Joins tensors of equal shape except along `dim`.
Tensor concat(const std::vector<Tensor>& tensors, int64_t dim);

}  // namespace microllm::ops
