// Kernel entry points of softmax and log-softmax. Rows are dense (R, N): F32 or F64 on the
// CPU; F32, BF16 or F16 on CUDA (F32 arithmetic).
#pragma once

#include "microllm/core/tensor.h"

namespace microllm::ops {

// y = softmax(x) or log_softmax(x) per row.
void softmax_forward_cpu(const Tensor& x, const Tensor& y, bool log);
// From the forward output y and dy: dx = y·(dy − Σ dy·y) (softmax),
// dx = dy − exp(y)·Σ dy (log-softmax).
void softmax_backward_cpu(const Tensor& y, const Tensor& dy, const Tensor& dx, bool log);
#if MICROLLM_WITH_CUDA
void softmax_forward_cuda(const Tensor& x, const Tensor& y, bool log);
void softmax_backward_cuda(const Tensor& y, const Tensor& dy, const Tensor& dx, bool log);
#endif

}  // namespace microllm::ops
