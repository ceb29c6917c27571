// CUDA index_select (embedding uses these kernels too): row gathers forward, deterministic
// row scatter-adds backward. Reference: torch.index_select and its backward (index_add_).
//
// Layout: x, dx (outer, n, inner) dense; index (K) I32/I64, dense, already range-checked;
// out, dout (outer, K, inner) dense. A "row" is the inner block of one (o, k) pair.
//   forward:  out[o][k][:] = x[o][index[k]][:]        (raw bytes, any dtype)
//   backward: dx[o][index[k]][:] += dout[o][k][:]     (F32 dx, k in increasing order)
#include <cstdint>

#include "../cuda_common.cuh"
#include "index_select_kernels.h"

namespace microllm::ops {
namespace {

using namespace cuda_detail;

constexpr int kThreads = 256;  // per block; a multiple of 32 (the backward uses warp ballots)
constexpr int kWarps = kThreads / kWarp;

// Copies rows as `Word`s, the widest of 16/8/4/2/1 bytes that divides the row size and the
// alignment of both buffers: the copy is bandwidth-bound and 16-byte accesses move the most
// bytes per instruction. Grid-stride over (outer, K, row_words).
template <class Word, class Index>
__global__ void gather_rows_kernel(const Word* x, const Index* index, Word* out, int64_t outer,
                                   int64_t n, int64_t K, int64_t row_words) {
  enter_dependent_grid();  // launched as a dependent grid
  const int64_t total = outer * K * row_words;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += stride) {
    const int64_t w = i % row_words;
    const int64_t row = i / row_words;  // (o, k) flattened over (outer, K)
    const int64_t k = row % K, o = row / K;
    out[i] = x[(o * n + static_cast<int64_t>(index[k])) * row_words + w];
  }
}

template <class Word, class Index>
void launch_gather(const Tensor& x, const Index* index, int64_t outer, int64_t n, int64_t K,
                   size_t row_bytes, const Tensor& out) {
  const int64_t row_words = static_cast<int64_t>(row_bytes / sizeof(Word));
  launch_dependent("gather_rows_kernel", gather_rows_kernel<Word, Index>,
                   dim3(grid_for(outer * K * row_words, kThreads)), dim3(kThreads), 0,
                   stream_of(out), static_cast<const Word*>(x.raw_data()), index,
                   static_cast<Word*>(out.raw_data()), outer, n, K, row_words);
}

// dx[o][index[k]][i] += dout[o][k][i] with no atomics and a fixed order.
//
// Each thread owns one column (o, i) and walks k in increasing order, so every dx element has
// one writer that adds in the CPU's order. Few columns (embedding: C of them) would leave the
// GPU idle, so the target rows are also split into `parts` classes (index % parts), one class
// per block: a block still owns whole dx elements, and work grows by parts × K index reads,
// not by a sort. Per tile of kThreads indices the block compacts the ones in its class
// (ballot + prefix count, order kept) so threads only visit the matching k.
// Grid: parts × column_blocks blocks, 1-D, block = (part, column block).
template <class T, class Index>
__global__ void scatter_add_rows_kernel(const T* dout, const Index* index, float* dx, int64_t outer,
                                        int64_t n, int64_t inner, int64_t K, int64_t parts,
                                        int64_t column_blocks) {
  __shared__ int64_t tile_target[kThreads];  // matching index values of the tile, in k order
  __shared__ int64_t tile_k[kThreads];       // their k
  __shared__ int warp_matches[kWarps];
  const int tid = threadIdx.x, lane = tid % kWarp, warp = tid / kWarp;
  const int64_t part = blockIdx.x / column_blocks;
  // This thread's column (o, i), flattened over (outer, inner).
  const int64_t column = (blockIdx.x % column_blocks) * kThreads + tid;
  const bool active = column < outer * inner;
  const int64_t o = active ? column / inner : 0, i = active ? column % inner : 0;
  float* dx_col = dx + o * n * inner + i;        // dx[o][·][i], stride inner
  const T* dout_col = dout + o * K * inner + i;  // dout[o][·][i], stride inner

  for (int64_t k0 = 0; k0 < K; k0 += kThreads) {
    // Compact this tile's indices of class `part`, keeping k order.
    const int64_t k = k0 + tid;
    const int64_t target = k < K ? static_cast<int64_t>(index[k]) : -1;
    const bool match = k < K && target % parts == part;
    const unsigned ballot = __ballot_sync(0xffffffffu, match);
    if (lane == 0) warp_matches[warp] = __popc(ballot);
    __syncthreads();
    int before = 0, matches = 0;
    for (int w = 0; w < kWarps; ++w) {
      if (w < warp) before += warp_matches[w];
      matches += warp_matches[w];
    }
    if (match) {
      const int slot = before + __popc(ballot & ((1u << lane) - 1u));
      tile_target[slot] = target;
      tile_k[slot] = k;
    }
    __syncthreads();
    if (active)
      for (int m = 0; m < matches; ++m)
        dx_col[tile_target[m] * inner] += to_float(dout_col[tile_k[m] * inner]);
    __syncthreads();  // the tile and the counts are overwritten next
  }
}

}  // namespace

void index_select_forward_cuda(const Tensor& x, const Tensor& index, int64_t outer, int64_t n,
                               int64_t inner, const Tensor& out) {
  const int64_t K = index.numel();
  const size_t row_bytes = static_cast<size_t>(inner) * dtype_size(x.dtype());
  if (outer * K * inner == 0) return;
  dispatch_cuda_index(index, "index_select", "index", [&](auto tag) {
    using Index = decltype(tag);
    const Index* idx = ptr<const Index>(index);
    const auto fits = [&](size_t word) {
      return row_bytes % word == 0 && reinterpret_cast<uintptr_t>(x.raw_data()) % word == 0 &&
             reinterpret_cast<uintptr_t>(out.raw_data()) % word == 0;
    };
    if (fits(16))
      launch_gather<uint4, Index>(x, idx, outer, n, K, row_bytes, out);
    else if (fits(8))
      launch_gather<uint2, Index>(x, idx, outer, n, K, row_bytes, out);
    else if (fits(4))
      launch_gather<uint32_t, Index>(x, idx, outer, n, K, row_bytes, out);
    else if (fits(2))
      launch_gather<uint16_t, Index>(x, idx, outer, n, K, row_bytes, out);
    else
      launch_gather<uint8_t, Index>(x, idx, outer, n, K, row_bytes, out);
  });
}

void index_select_backward_cuda(const Tensor& dout, const Tensor& index, int64_t outer, int64_t n,
                                int64_t inner, const Tensor& dx) {
  MICROLLM_CHECK(dx.dtype() == DType::F32, "index_select",
                 "CUDA gradients accumulate in f32, found ", dx.describe());
  const int64_t K = index.numel(), columns = outer * inner;
  if (K == 0 || columns == 0) return;
  // Classes of target rows: enough blocks to reach about 64K threads, at most 64 classes
  // (each class re-reads all K indices) and never more than the n target rows.
  constexpr int64_t kTargetThreads = 65536, kMaxParts = 64;
  int64_t parts = ceil_div(kTargetThreads, columns);
  parts = parts > kMaxParts ? kMaxParts : parts;
  parts = parts > n ? n : parts;
  parts = parts < 1 ? 1 : parts;
  const int64_t column_blocks = ceil_div(columns, kThreads);
  MICROLLM_CHECK(parts * column_blocks <= INT32_MAX, "index_select",
                 "too many columns for the CUDA grid: ", dout.describe());
  dispatch_cuda_float(dout.dtype(), "index_select", [&](auto tag) {
    using T = decltype(tag);
    dispatch_cuda_index(index, "index_select", "index", [&](auto index_tag) {
      using Index = decltype(index_tag);
      scatter_add_rows_kernel<T, Index>
          <<<static_cast<unsigned>(parts * column_blocks), kThreads, 0, stream_of(dx)>>>(
              ptr<const T>(dout), ptr<const Index>(index), ptr<float>(dx), outer, n, inner, K,
              parts, column_blocks);
      CUDA_CHECK_LAUNCH("scatter_add_rows_kernel");
    });
  });
}

}  // namespace microllm::ops
