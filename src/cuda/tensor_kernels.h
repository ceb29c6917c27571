// Host entry points of the CUDA kernels under Tensor itself: strided converting copy, fill and
// arange.
#pragma once

#include "microllm/core/tensor.h"

namespace microllm::cuda {

// dst = src (same CUDA device, any strides up to rank 8, any dtypes) on the current stream.
void copy_tensor(const Tensor& dst, const Tensor& src);
// Every element of dst = value, converted to dst's dtype.
void fill_tensor(const Tensor& dst, double value);
// dst[i] = start + i for a dense 1-D dst, computed on the device (nothing is copied).
void arange_tensor(const Tensor& dst, int64_t start);

}  // namespace microllm::cuda
