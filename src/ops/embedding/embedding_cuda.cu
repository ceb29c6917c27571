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
//   backward into a pending gradient (embedding_backward_add_cuda): the same sums into an
//             F32 scratch (V, C) of which only the named rows are zeroed, then each named row
//             is added, rounded, into dweight by the threads of its first token (the
//             smallest k with that id, found with atomicMin: the minimum is the same in any
//             order); the other rows of dweight are not read or written.
#include <climits>

#include "../common.h"
#include "../cuda_common.cuh"
#include "../index_select/index_select_kernels.h"
#include "embedding_kernels.h"

namespace microllm::ops {
namespace {

using namespace cuda_detail;
constexpr int kThreads = 256;

// For every token k (N of them) and column c: scratch[ids[k]][c] = 0, and first[ids[k]] =
// INT_MAX (no token yet). Tokens sharing an id write the same values.
template <class I>
__global__ void reset_named_rows_kernel(const I* ids, int64_t n, int64_t C, float* scratch,
                                        int* first) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n * C;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t row = static_cast<int64_t>(ids[i / C]), c = i % C;
    scratch[row * C + c] = 0.0f;
    if (c == 0) first[row] = INT_MAX;
  }
}

// first[ids[k]] = the smallest k with that id.
template <class I>
__global__ void first_token_kernel(const I* ids, int64_t n, int* first) {
  for (int64_t k = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; k < n;
       k += static_cast<int64_t>(gridDim.x) * blockDim.x)
    atomicMin(first + static_cast<int64_t>(ids[k]), static_cast<int>(k));
}

// dweight[r][c] = round(dweight[r][c] + round(scratch[r][c])) for each named row r, by the
// threads of its first token only.
template <class T, class I>
__global__ void add_named_rows_kernel(const I* ids, int64_t n, int64_t C, const float* scratch,
                                      const int* first, T* dweight) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n * C;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t k = i / C, c = i % C, row = static_cast<int64_t>(ids[k]);
    if (first[row] != static_cast<int>(k)) continue;
    T& w = dweight[row * C + c];
    w = from_float<T>(to_float(w) + to_float(from_float<T>(scratch[row * C + c])));
  }
}

}  // namespace

void embedding_forward_cuda(const Tensor& weight, const Tensor& ids, const Tensor& out) {
  index_select_forward_cuda(weight, ids, /*outer=*/1, /*n=*/weight.size(0),
                            /*inner=*/weight.size(1), out);
}

void embedding_backward_cuda(const Tensor& dout, const Tensor& ids, const Tensor& dweight) {
  index_select_backward_cuda(dout, ids, /*outer=*/1, /*n=*/dweight.size(0),
                             /*inner=*/dweight.size(1), dweight);
}

void embedding_backward_add_cuda(const Tensor& dout, const Tensor& ids, const Tensor& dweight) {
  MICROLLM_CHECK(dweight.dim() == 2 && dweight.is_contiguous() && dout.is_contiguous() &&
                     ids.is_contiguous() && dout.numel() == ids.numel() * dweight.size(1),
                 "embedding",
                 "adding into a gradient takes dense dweight (V, C), ids (N) and "
                 "dout (N, C), found dweight ",
                 dweight.describe(), " ids ", ids.describe(), " dout ", dout.describe());
  const int64_t V = dweight.size(0), C = dweight.size(1), n = ids.numel();
  MICROLLM_CHECK(n < INT_MAX, "embedding", "too many tokens for the first-token index: ", n);
  if (n == 0 || C == 0) return;
  const Tensor scratch = Tensor::empty({V, C}, DType::F32, dweight.device());  // (V, C)
  const Tensor first = Tensor::empty({V}, DType::I32, dweight.device());       // (V)
  const cudaStream_t stream = stream_of(dweight);
  const unsigned grid = grid_for(n * C, kThreads), token_grid = grid_for(n, kThreads);
  dispatch_cuda_index(ids, "embedding", "ids", [&](auto index_tag) {
    using I = decltype(index_tag);
    reset_named_rows_kernel<I><<<grid, kThreads, 0, stream>>>(ptr<const I>(ids), n, C,
                                                              ptr<float>(scratch), ptr<int>(first));
    CUDA_CHECK_LAUNCH("reset_named_rows_kernel");
    first_token_kernel<I>
        <<<token_grid, kThreads, 0, stream>>>(ptr<const I>(ids), n, ptr<int>(first));
    CUDA_CHECK_LAUNCH("first_token_kernel");
  });
  embedding_backward_cuda(dout, ids, scratch);
  dispatch_cuda_float(dweight.dtype(), "embedding", [&](auto tag) {
    using T = decltype(tag);
    dispatch_cuda_index(ids, "embedding", "ids", [&](auto index_tag) {
      using I = decltype(index_tag);
      add_named_rows_kernel<T, I>
          <<<grid, kThreads, 0, stream>>>(ptr<const I>(ids), n, C, ptr<const float>(scratch),
                                          ptr<const int>(first), ptr<T>(dweight));
      CUDA_CHECK_LAUNCH("add_named_rows_kernel");
    });
  });
}

}  // namespace microllm::ops
