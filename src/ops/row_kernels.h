// Kernel entry points of the operators that work row by row on the last dimension:
// softmax, log-softmax, RMSNorm, SiLU and SwiGLU. Rows are dense (R, N): F32 or F64 on the
// CPU; F32, BF16 or F16 on CUDA (F32 arithmetic). Saved statistics (rstd) are F32 (F64 for
// F64 inputs); weights have the input's dtype.
#pragma once

#include "microllm/core/tensor.h"

namespace microllm::ops {

// y = softmax(x) or log_softmax(x) per row.
void softmax_forward_cpu(const Tensor& x, const Tensor& y, bool log);
// From the forward output y and dy: dx = y·(dy − Σ dy·y) (softmax),
// dx = dy − exp(y)·Σ dy (log-softmax).
void softmax_backward_cpu(const Tensor& y, const Tensor& dy, const Tensor& dx, bool log);

// y = x · rstd · weight with rstd = 1/sqrt(mean(x²) + eps), rstd (R) saved for backward.
void rms_norm_forward_cpu(const Tensor& x, const Tensor& weight, double eps, const Tensor& y,
                          const Tensor& rstd);
// dx (R, N) and dweight (N) from dy; dweight is overwritten.
void rms_norm_backward_cpu(const Tensor& x, const Tensor& weight, const Tensor& rstd,
                           const Tensor& dy, const Tensor& dx, const Tensor& dweight);

// Elementwise over dense tensors of equal size.
void silu_forward_cpu(const Tensor& x, const Tensor& y);
void silu_backward_cpu(const Tensor& x, const Tensor& dy, const Tensor& dx);
void swiglu_forward_cpu(const Tensor& gate, const Tensor& up, const Tensor& y);
void swiglu_backward_cpu(const Tensor& gate, const Tensor& up, const Tensor& dy,
                         const Tensor& dgate, const Tensor& dup);

#if MICROLLM_WITH_CUDA
void softmax_forward_cuda(const Tensor& x, const Tensor& y, bool log);
void softmax_backward_cuda(const Tensor& y, const Tensor& dy, const Tensor& dx, bool log);
void rms_norm_forward_cuda(const Tensor& x, const Tensor& weight, double eps, const Tensor& y,
                           const Tensor& rstd);
void rms_norm_backward_cuda(const Tensor& x, const Tensor& weight, const Tensor& rstd,
                            const Tensor& dy, const Tensor& dx, const Tensor& dweight);
void silu_forward_cuda(const Tensor& x, const Tensor& y);
void silu_backward_cuda(const Tensor& x, const Tensor& dy, const Tensor& dx);
void swiglu_forward_cuda(const Tensor& gate, const Tensor& up, const Tensor& y);
void swiglu_backward_cuda(const Tensor& gate, const Tensor& up, const Tensor& dy,
                          const Tensor& dgate, const Tensor& dup);
#endif

}  // namespace microllm::ops
