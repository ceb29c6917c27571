// Kernel entry points of matmul.
#pragma once

#include "microllm/core/tensor.h"

namespace microllm::ops {

// One GEMM problem over a batch: out[b] = op(a[b]) · op(b[b]), out dense (batch, M, N).
// a, b are rank 3 (batch, rows, cols) views, batch stride 0 when shared; F32/F64.
struct GemmProblem {
  int64_t batch, m, n, k;
  bool trans_a, trans_b;
};
void gemm_cpu(const GemmProblem& p, const Tensor& a, const Tensor& b, const Tensor& out);

#if MICROLLM_WITH_CUDA
// cuBLASLt: F32/BF16/F16 operands of one dtype, F32 accumulation; bias (N) or undefined is
// added by the GEMM epilogue.
void gemm_cuda(const GemmProblem& p, const Tensor& a, const Tensor& b, const Tensor& bias,
               const Tensor& out);
#endif

}  // namespace microllm::ops
