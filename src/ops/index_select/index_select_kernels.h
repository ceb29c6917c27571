// Kernel entry points of index_select.
#pragma once

#include "microllm/core/tensor.h"

namespace microllm::ops {

// out (outer, K, inner) = x (outer, n, inner) rows picked by index (K); dense, any dtype.
void index_select_forward_cpu(const Tensor& x, const Tensor& index, int64_t outer, int64_t n,
                              int64_t inner, const Tensor& out);
// dx (outer, n, inner), zero-filled by the caller, += dout (outer, K, inner) in k order.
void index_select_backward_cpu(const Tensor& dout, const Tensor& index, int64_t outer, int64_t n,
                               int64_t inner, const Tensor& dx);
#if MICROLLM_WITH_CUDA
void index_select_forward_cuda(const Tensor& x, const Tensor& index, int64_t outer, int64_t n,
                               int64_t inner, const Tensor& out);
// dx is F32 (zero-filled); dout F32/BF16/F16. Deterministic (no atomics).
void index_select_backward_cuda(const Tensor& dout, const Tensor& index, int64_t outer, int64_t n,
                                int64_t inner, const Tensor& dx);
#endif

}  // namespace microllm::ops
