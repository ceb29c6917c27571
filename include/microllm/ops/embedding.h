// Embedding lookup: rows of a (V, C) table picked by integer ids.
#pragma once

#include "microllm/core/tensor.h"

namespace microllm::ops {

// weight (V, C), ids (...) I32/I64 with 0 ≤ id < V → (..., C)
Tensor embedding(const Tensor& weight, const Tensor& ids);

// The allocation-free form: out (..., C) preallocated dense in weight's dtype and device,
// weight and ids dense; rows are copied as bytes, so every floating dtype works on both
// devices. No autograd. CPU ids are range-checked (host memory); CUDA ids are not read back:
// the caller validates them where they enter, and an id outside [0, V) is undefined.
void embedding_out(const Tensor& weight, const Tensor& ids, const Tensor& out);

}  // namespace microllm::ops
