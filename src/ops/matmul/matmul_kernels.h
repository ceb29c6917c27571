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
// The same product for GemmMode::batch_invariant (gemm_cpu_invariant.cpp): a fixed-order
// kernel whose rows do not depend on M; any strides (rows are packed when not dense in K).
void gemm_cpu_batch_invariant(const GemmProblem& p, const Tensor& a, const Tensor& b,
                              const Tensor& out);

#if MICROLLM_WITH_CUDA
// cuBLASLt: F32/BF16/F16 operands of one dtype, F32 accumulation; bias (N) or undefined is
// added by the GEMM epilogue.
// The calling thread's GemmMode picks the plan (see microllm/ops/gemm_mode.h).
void gemm_cuda(const GemmProblem& p, const Tensor& a, const Tensor& b, const Tensor& bias,
               const Tensor& out);
#endif

}  // namespace microllm::ops
