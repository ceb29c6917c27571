// CPU GEMM through OpenBLAS (cblas_sgemm / cblas_dgemm), one call per batch entry, and the
// bias rows of linear.
//
// Each operand is handed to BLAS as a row-major matrix with a leading dimension. A view whose
// last two dimensions are a transposed dense matrix (stride 1 on the row dimension) is passed
// with the transpose flag flipped instead of being copied; other layouts are made dense.
#include <cblas.h>

#include "../common.h"
#include "matmul_kernels.h"
#include "microllm/ops/gemm_mode.h"

namespace microllm::ops {
namespace {

struct BlasOperand {
  Tensor tensor;  // keeps a dense copy alive when one was needed
  bool transposed;
  int64_t ld;
  int64_t batch_stride;
};

// `t` (batch, rows, cols) read with `trans` → a BLAS-ready operand.
BlasOperand blas_operand(const Tensor& t, bool trans) {
  const int64_t rows = t.shape()[1], cols = t.shape()[2];
  bool transposed = trans;
  int64_t ld = 0;
  if (blas_layout(rows, cols, t.strides()[1], t.strides()[2], transposed, ld))
    return {t, transposed, ld, t.strides()[0]};
  Tensor dense = t.contiguous();
  return {dense, trans, cols, t.shape()[0] == 1 ? 0 : rows * cols};
}

}  // namespace

bool blas_layout(int64_t rows, int64_t cols, int64_t s_row, int64_t s_col, bool& transposed,
                 int64_t& ld) {
  if ((s_col == 1 || cols == 1) && s_row >= std::max<int64_t>(cols, 1)) {
    ld = s_row;
    return true;
  }
  if ((s_row == 1 || rows == 1) && s_col >= std::max<int64_t>(rows, 1)) {
    transposed = !transposed;
    ld = s_col;
    return true;
  }
  return false;
}

void gemm_cpu(const GemmProblem& p, const Tensor& a, const Tensor& b, const Tensor& out) {
  // OpenBLAS picks kernels and thread splits by M, so rows change with the batch.
  if (gemm_mode() == GemmMode::batch_invariant) {
    gemm_cpu_batch_invariant(p, a, b, out);
    return;
  }
  const BlasOperand oa = blas_operand(a, p.trans_a);  // keep any dense copy alive
  const BlasOperand ob = blas_operand(b, p.trans_b);
  const int64_t a_batch = a.shape()[0] == 1 ? 0 : oa.batch_stride;
  const int64_t b_batch = b.shape()[0] == 1 ? 0 : ob.batch_stride;
  gemm_operands_cpu(p, out.dtype(), {oa.tensor.raw_data(), oa.transposed, oa.ld, a_batch},
                    {ob.tensor.raw_data(), ob.transposed, ob.ld, b_batch}, out.raw_data());
}

void gemm_operands_cpu(const GemmProblem& p, DType dtype, const GemmOperand& a,
                       const GemmOperand& b, void* out) {
  const auto ta = a.transposed ? CblasTrans : CblasNoTrans;
  const auto tb = b.transposed ? CblasTrans : CblasNoTrans;
  detail::dispatch_float(dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* pa = static_cast<const T*>(a.data);
    const T* pb = static_cast<const T*>(b.data);
    T* pc = static_cast<T*>(out);
    for (int64_t i = 0; i < p.batch; ++i) {
      const T* ai = pa + i * a.batch_stride;
      const T* bi = pb + i * b.batch_stride;
      T* ci = pc + i * p.m * p.n;
      if constexpr (std::is_same_v<T, float>)
        cblas_sgemm(CblasRowMajor, ta, tb, p.m, p.n, p.k, 1.0f, ai, a.ld, bi, b.ld, 0.0f, ci, p.n);
      else
        cblas_dgemm(CblasRowMajor, ta, tb, p.m, p.n, p.k, 1.0, ai, a.ld, bi, b.ld, 0.0, ci, p.n);
    }
  });
}

void add_bias_rows_cpu(const Tensor& out, const Tensor& bias) {
  const int64_t n = bias.numel(), rows = n == 0 ? 0 : out.numel() / n;
  detail::dispatch_float(out.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* po = out.data<T>();         // (R, N)
    const T* pb = bias.data<T>();  // (N)
#pragma omp parallel for schedule(static) if (rows * n > (1 << 14))
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < n; ++j) po[r * n + j] = po[r * n + j] + pb[j];
  });
}

}  // namespace microllm::ops
