// Kernel entry points of embedding.
#pragma once

#include "microllm/core/tensor.h"

namespace microllm::ops {

// out (N, C) = weight (V, C) rows picked by ids (N) I32/I64, all dense, ids already checked.
void embedding_forward_cpu(const Tensor& weight, const Tensor& ids, const Tensor& out);
// dweight (V, C) += dout (N, C) rows scattered by ids, in token order (deterministic).
// dweight is zero-filled by the caller; F32/F64 on the CPU.
void embedding_backward_cpu(const Tensor& dout, const Tensor& ids, const Tensor& dweight);
#if MICROLLM_WITH_CUDA
void embedding_forward_cuda(const Tensor& weight, const Tensor& ids, const Tensor& out);
// dweight is F32 (zero-filled); dout F32/BF16/F16. Deterministic (no atomics).
void embedding_backward_cuda(const Tensor& dout, const Tensor& ids, const Tensor& dweight);
// dweight (V, C) F32/BF16/F16 (dense, the weight's dtype): every row r that ids name becomes
// round(dweight[r] + round(Σ dout rows with id r, summed in F32 in token order)), the sum
// embedding_backward_cuda makes and the rounding of `to` and `add`; the other rows are not
// touched. Deterministic (no atomics in any sum).
void embedding_backward_add_cuda(const Tensor& dout, const Tensor& ids, const Tensor& dweight);
#endif

}  // namespace microllm::ops
