// Embedding lookup: rows of a (V, C) table picked by integer ids.
#pragma once

#include "microllm/core/tensor.h"

namespace microllm::ops {

// weight (V, C), ids (...) I32/I64 with 0 ≤ id < V → (..., C)
Tensor embedding(const Tensor& weight, const Tensor& ids);

}  // namespace microllm::ops
