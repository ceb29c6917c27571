// Kernel entry points of matmul.
#pragma once

#include "microllm/core/tensor.h"
#include "microllm/ops/matmul.h"

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

// One operand as BLAS reads it: row-major rows `ld` elements apart, read transposed or not,
// batch entries `batch_stride` elements apart (0: shared by the batch).
struct GemmOperand {
  const void* data;
  bool transposed;
  int64_t ld, batch_stride;
};
// How BLAS reads a (rows, cols) matrix with element strides (s_row, s_col): as stored with
// leading dimension ld, or, for a transposed dense matrix, with `transposed` flipped (no
// copy). False when neither fits (the caller makes the operand dense first).
bool blas_layout(int64_t rows, int64_t cols, int64_t s_row, int64_t s_col, bool& transposed,
                 int64_t& ld);
// The same GEMM on operands already in BLAS form (gemm_cpu builds them from views; the
// allocation-free linear_out from dense tensors): out (batch, M, N) dense of `dtype`, F32
// or F64. p's trans flags are ignored: each operand carries its own.
void gemm_operands_cpu(const GemmProblem& p, DType dtype, const GemmOperand& a,
                       const GemmOperand& b, void* out);
// out (R, N) dense += bias (N) dense on every row, F32/F64 (the CPU bias of linear).
void add_bias_rows_cpu(const Tensor& out, const Tensor& bias);

// gemv_out (see matmul.h): x (M, K), weight (N, K) [(2F, K) with swiglu], bias (N) or
// undefined, out (M, N) [(M, F)], all dense, validated; M ≤ kGemvMaxRows.
void gemv_cpu(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& out,
              bool swiglu);
// The norm prologue on CUDA keeps the M normalized rows in shared memory: at most this many
// bytes of them, and rows of at most as many 16-byte groups as one RMSNorm block has threads.
inline constexpr int64_t kGemvNormMaxBytes = 40 * 1024;  // + static shared < 48 KB
inline constexpr int64_t kGemvNormMaxGroups = 1024;
#if MICROLLM_WITH_CUDA
// The fused form on CUDA (the CPU composes the unfused operators, see gemv.cpp); the norm
// weight and residual validated against x and out.
void gemv_cuda(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& out,
               const GemvFusion& fusion);
#endif

#if MICROLLM_WITH_CUDA
// cuBLASLt: F32/BF16/F16 operands of one dtype, F32 accumulation; bias (N) or undefined is
// added by the GEMM epilogue.
// The calling thread's GemmMode picks the plan (see microllm/ops/gemm_mode.h).
void gemm_cuda(const GemmProblem& p, const Tensor& a, const Tensor& b, const Tensor& bias,
               const Tensor& out);
#endif

}  // namespace microllm::ops
