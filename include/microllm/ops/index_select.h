// Index-select: entries picked along one dimension by integer indices.
#pragma once

#include "microllm/core/tensor.h"

namespace microllm::ops {

// Picks entries along `dim` by integer `index` (K): out has size K along `dim`.
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index);

}  // namespace microllm::ops
