// Concatenation of tensors along one dimension.
#pragma once

#include <vector>

#include "microllm/core/tensor.h"

namespace microllm::ops {

// Joins tensors of equal shape except along `dim`.
Tensor concat(const std::vector<Tensor>& tensors, int64_t dim);

// concat's values without the copy where the tensors already lie side by side along `dim`
// in one storage (the row blocks of one matrix, as ModelWeights keeps Q/K/V and gate/up; the
// gradients an op wrote into one buffer): the same storage, dtype and strides, equal shapes
// outside `dim`, each starting where the previous one ends along it. Then the result is a
// view of that storage and backward hands each tensor its slice of the gradient as a view;
// otherwise it is concat.
Tensor join(const std::vector<Tensor>& tensors, int64_t dim);

// x cut along `dim` into consecutive parts of the given sizes (they add up to x's size
// there): views of x, recorded as one node whose backward joins the parts' gradients
// (zeros for a part that received none) into x's gradient, one copy or none.
std::vector<Tensor> split(const Tensor& x, int64_t dim, const std::vector<int64_t>& sizes);

}  // namespace microllm::ops
