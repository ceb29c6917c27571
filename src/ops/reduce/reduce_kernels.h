// Kernel entry points of the reductions. The reduced tensor is seen as (outer, n, inner)
// with the reduced dimension in the middle.
#pragma once

#include "microllm/core/tensor.h"

namespace microllm::ops {

enum class ReduceOp { Sum, Max, Argmax };

// x: dense (outer, n, inner) F32/F64 (CUDA: F32/BF16/F16, sums accumulated in F32); out: dense
// (outer, inner), x's dtype (I64 for Argmax).
void reduce_forward_cpu(ReduceOp op, const Tensor& x, int64_t outer, int64_t n, int64_t inner,
                        const Tensor& out);
// grad_x (outer, n, inner) = 0 except grad_x[o, index[o, i], i] = grad[o, i].
void scatter_along_dim_cpu(const Tensor& grad, const Tensor& index, int64_t outer, int64_t n,
                           int64_t inner, const Tensor& grad_x);

#if MICROLLM_WITH_CUDA
void reduce_forward_cuda(ReduceOp op, const Tensor& x, int64_t outer, int64_t n, int64_t inner,
                         const Tensor& out);
void scatter_along_dim_cuda(const Tensor& grad, const Tensor& index, int64_t outer, int64_t n,
                            int64_t inner, const Tensor& grad_x);
#endif

}  // namespace microllm::ops
