// Kernel entry points of RMSNorm. Rows are dense (R, C): F32 or F64 on the CPU; F32, BF16 or
// F16 on CUDA (F32 arithmetic). The weight (C) has the input's dtype; the saved rstd (R) is
// F32 (F64 for F64 inputs).
#pragma once

#include "microllm/core/tensor.h"

namespace microllm::ops {

// y = x · rstd · weight with rstd = 1/sqrt(mean(x²) + eps), rstd (R) saved for backward; an
// undefined rstd is not written (the allocation-free rms_norm_out saves nothing). y must not
// overlap x or weight.
void rms_norm_forward_cpu(const Tensor& x, const Tensor& weight, double eps, const Tensor& y,
                          const Tensor& rstd);
// sum = x + residual (rounded to the dtype), then y = rms_norm(sum) and rstd as above: one
// pass on CUDA. sum may be x or residual; y overlaps none of them.
void add_rms_norm_forward_cpu(const Tensor& x, const Tensor& residual, const Tensor& weight,
                              double eps, const Tensor& sum, const Tensor& y, const Tensor& rstd);
// dx (R, C) and dweight (C) from dy; dweight is overwritten. With a dresidual (R, C) (the
// gradient reaching the norm's input by another path), dx is that plus the norm's dx, each
// rounded to the dtype first: the bits of add(dx, dresidual).
void rms_norm_backward_cpu(const Tensor& x, const Tensor& weight, const Tensor& rstd,
                           const Tensor& dy, const Tensor& dresidual, const Tensor& dx,
                           const Tensor& dweight);
#if MICROLLM_WITH_CUDA
// Threads of the CUDA forward kernel's block for a row of `groups` 16-byte groups: one group
// per thread up to 1,024 threads, a multiple of 32. The order of a row's sum of squares
// follows from it, so the GEMV's norm prologue (gemv_cuda.cu) plays the same threads.
inline int64_t rms_norm_forward_threads(int64_t groups) {
  const int64_t threads = (groups + 31) / 32 * 32;
  return threads < 32 ? 32 : (threads > 1024 ? 1024 : threads);
}
void rms_norm_forward_cuda(const Tensor& x, const Tensor& weight, double eps, const Tensor& y,
                           const Tensor& rstd);
void add_rms_norm_forward_cuda(const Tensor& x, const Tensor& residual, const Tensor& weight,
                               double eps, const Tensor& sum, const Tensor& y, const Tensor& rstd);
void rms_norm_backward_cuda(const Tensor& x, const Tensor& weight, const Tensor& rstd,
                            const Tensor& dy, const Tensor& dresidual, const Tensor& dx,
                            const Tensor& dweight);
#endif

}  // namespace microllm::ops
