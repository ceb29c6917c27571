// CPU GEMM through OpenBLAS (cblas_sgemm / cblas_dgemm), one call per batch entry.
//
// Each operand is handed to BLAS as a row-major matrix with a leading dimension. A view whose
// last two dimensions are a transposed dense matrix (stride 1 on the row dimension) is passed
// with the transpose flag flipped instead of being copied; other layouts are made dense.
// GemmMode::batch_invariant goes to gemm_cpu_invariant.cpp instead.
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
  const int64_t s_row = t.strides()[1], s_col = t.strides()[2];
  if ((s_col == 1 || cols == 1) && s_row >= std::max<int64_t>(cols, 1))
    return {t, trans, s_row, t.strides()[0]};
  if ((s_row == 1 || rows == 1) && s_col >= std::max<int64_t>(rows, 1))
    return {t, !trans, s_col, t.strides()[0]};
  Tensor dense = t.contiguous();
  return {dense, trans, cols, t.shape()[0] == 1 ? 0 : rows * cols};
}

}  // namespace

void gemm_cpu(const GemmProblem& p, const Tensor& a, const Tensor& b, const Tensor& out) {
  // OpenBLAS picks kernels and thread splits by M, so rows change with the batch.
  if (gemm_mode() == GemmMode::batch_invariant) {
    gemm_cpu_batch_invariant(p, a, b, out);
    return;
  }
  const BlasOperand oa = blas_operand(a, p.trans_a);
  const BlasOperand ob = blas_operand(b, p.trans_b);
  const auto ta = oa.transposed ? CblasTrans : CblasNoTrans;
  const auto tb = ob.transposed ? CblasTrans : CblasNoTrans;
  const int64_t a_batch = a.shape()[0] == 1 ? 0 : oa.batch_stride;
  const int64_t b_batch = b.shape()[0] == 1 ? 0 : ob.batch_stride;
  detail::dispatch_float(out.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* pa = oa.tensor.template data<T>();
    const T* pb = ob.tensor.template data<T>();
    T* pc = out.data<T>();
    for (int64_t i = 0; i < p.batch; ++i) {
      const T* ai = pa + i * a_batch;
      const T* bi = pb + i * b_batch;
      T* ci = pc + i * p.m * p.n;
      if constexpr (std::is_same_v<T, float>)
        cblas_sgemm(CblasRowMajor, ta, tb, p.m, p.n, p.k, 1.0f, ai, oa.ld, bi, ob.ld, 0.0f, ci,
                    p.n);
      else
        cblas_dgemm(CblasRowMajor, ta, tb, p.m, p.n, p.k, 1.0, ai, oa.ld, bi, ob.ld, 0.0, ci, p.n);
    }
  });
}

}  // namespace microllm::ops
