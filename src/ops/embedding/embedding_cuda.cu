// CUDA embedding: index_select along dim 0 of the (V, C) table, so it runs the index_select
// kernels (src/ops/index_select/index_select_cuda.cu) with outer = 1, n = V, inner = C.
//
// Layout: weight, dweight (V, C); ids (N) I32/I64, dense, range-checked by the caller;
// out, dout (N, C).
//   forward:  row copies in 16-byte words when the row size and buffers allow
//   backward: dweight[id][c] += dout[t][c] in token order, without atomics: each thread owns
//             a column c for one class of vocabulary rows (id % parts), so every dweight
//             element has one writer. Cost: parts × N id reads (parts ≤ 64, through shared
//             memory) plus the N·C adds; no sort and no extra memory.
#include "../common.h"
#include "../index_select/index_select_kernels.h"
#include "embedding_kernels.h"

namespace microllm::ops {

void embedding_forward_cuda(const Tensor& weight, const Tensor& ids, const Tensor& out) {
  index_select_forward_cuda(weight, ids, /*outer=*/1, /*n=*/weight.size(0),
                            /*inner=*/weight.size(1), out);
}

void embedding_backward_cuda(const Tensor& dout, const Tensor& ids, const Tensor& dweight) {
  index_select_backward_cuda(dout, ids, /*outer=*/1, /*n=*/dweight.size(0),
                             /*inner=*/dweight.size(1), dweight);
}

}  // namespace microllm::ops
