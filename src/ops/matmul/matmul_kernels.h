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

}  // namespace microllm::ops
