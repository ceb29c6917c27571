// CUDA reductions along one dimension of x seen as (outer, n, inner), and the scatter that
// routes the gradient of max back to the winning positions. F32/BF16/F16 storage, F32
// arithmetic. Reference: the CPU kernels in reduce_cpu.cpp (torch.sum / max / argmax).
//
// Layouts (dense, row-major):
//   x       (outer, n, inner)
//   values  (outer, inner)     x's dtype (Sum, Max)
//   indices (outer, inner)     int64 (Argmax)
//
// inner == 1 reduces contiguous rows: a warp per short row or a block per long row, each
// thread striding over the row, then a shuffle tree. inner > 1 reduces columns: a block
// covers 32 adjacent columns (coalesced loads) and splits n among blockDim.y thread rows,
// whose partials combine in shared memory in a fixed order (a sum over 16-byte aligned
// columns reads runs of 16 bytes a thread, in the same order). When the outputs alone would
// leave most of the GPU idle (sum_all, argmax over one vocabulary row, a bias gradient),
// a first pass reduces chunks of n into F32 partials (outer, chunks, inner) and a second
// pass reduces those. No atomics: the launch shapes depend only on the tensor shapes, so
// every result is the same bit for bit from run to run.
//
// Max and Argmax keep (value, index) pairs ordered by value with NaN above everything and,
// between equal values, the smaller index first, so the first occurrence of the largest
// value wins as on the CPU, whatever the order in which partial results meet.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "../cuda_common.cuh"
#include "reduce_kernels.h"

namespace microllm::ops {
namespace {

using namespace cuda_detail;

constexpr int64_t kNoIndex = INT64_MAX;

// The largest value seen so far and the index it stands for; kNoIndex: nothing seen yet.
struct Best {
  float v;
  int64_t k;
};

__device__ __forceinline__ Best no_best() { return {-INFINITY, kNoIndex}; }

// True when (v, k) ranks above (b, kb): NaN is the largest value (the first NaN wins), and
// equal values rank by the smaller index. A total order, so partials combine in any order.
__device__ __forceinline__ bool ranks_above(float v, int64_t k, float b, int64_t kb) {
  const bool v_nan = isnan(v), b_nan = isnan(b);
  if (v_nan || b_nan) return v_nan && (!b_nan || k < kb);
  return v > b || (v == b && k < kb);
}

__device__ __forceinline__ Best better_of(Best a, Best b) {
  return ranks_above(b.v, b.k, a.v, a.k) ? b : a;
}

// Folds element (v, k) into one thread's scan. A thread meets its elements with growing
// k, so a later one wins only when strictly larger or the first NaN: the CPU's rule, and
// cheaper than ranks_above in the loop that touches every element.
__device__ __forceinline__ void scan_add(Best& best, float v, int64_t k) {
  if (best.k == kNoIndex || v > best.v || (isnan(v) && !isnan(best.v))) best = {v, k};
}

__device__ __forceinline__ Best warp_best(Best b) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) {
    const Best other{
        __shfl_xor_sync(0xffffffffu, b.v, offset),
        static_cast<int64_t>(__shfl_xor_sync(0xffffffffu, static_cast<long long>(b.k), offset))};
    b = better_of(b, other);
  }
  return b;
}

// Best over the block (blockDim.x a multiple of 32); every thread gets the result. The same
// two-level shuffle tree as block_max, with 32 pairs of shared scratch.
__device__ __forceinline__ Best block_best(Best b, float* scratch_v, int64_t* scratch_k) {
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  b = warp_best(b);
  __syncthreads();  // scratch may still be read for the previous row
  if (lane == 0) {
    scratch_v[warp] = b.v;
    scratch_k[warp] = b.k;
  }
  __syncthreads();
  const int warps = blockDim.x / kWarp;
  b = lane < warps ? Best{scratch_v[lane], scratch_k[lane]} : no_best();
  return warp_best(b);
}

// One pass: x (outer, n, inner) read in `chunks` runs of `chunk_len` along n, one result
// per run, so values and indices are (outer, chunks, inner); either may be null when not
// wanted. x_index, when set, holds the index each x element stands for (the second pass,
// over first-pass results, whose indices grow along n like plain positions); otherwise
// element k stands for k. TIn/TOut: T → T (one pass), T → float, float → T (two passes).
template <class TIn, class TOut>
struct ReducePass {
  ReduceOp op;
  const TIn* x;
  const int64_t* x_index;
  int64_t outer, n, inner, chunk_len, chunks;
  TOut* values;
  int64_t* indices;
};

constexpr int kWarpRowsPerBlock = 8;  // 256-thread blocks for the warp-per-row kernel

// Rows of contiguous elements (inner == 1), one (row, chunk) per group of threads: a warp
// when kWarpPerRow (short runs: no block-wide synchronization), else the whole block.
// Groups stride over the (row, chunk) pairs, so any number fits the grid.
template <class TIn, class TOut, bool kWarpPerRow>
__global__ void __launch_bounds__(kWarpPerRow ? kWarpRowsPerBlock* kWarp : 1024)
    reduce_rows_kernel(ReducePass<TIn, TOut> p) {
  __shared__ float scratch_v[kWarp];
  __shared__ int64_t scratch_k[kWarp];
  const int group_size = kWarpPerRow ? kWarp : blockDim.x;
  const int lane = kWarpPerRow ? threadIdx.x % kWarp : threadIdx.x;
  const int64_t groups_per_block = kWarpPerRow ? blockDim.x / kWarp : 1;
  const int64_t first = blockIdx.x * groups_per_block + (kWarpPerRow ? threadIdx.x / kWarp : 0);
  const int64_t stride = static_cast<int64_t>(gridDim.x) * groups_per_block;
  const int64_t runs = p.outer * p.chunks;
  // The trip count depends only on the group, so every thread of a group reaches the
  // shuffles (and, for a block, the __syncthreads inside block_sum / block_best).
  for (int64_t r = first; r < runs; r += stride) {
    const int64_t o = r / p.chunks, c = r % p.chunks;
    const int64_t begin = c * p.chunk_len, end = std::min(p.n, begin + p.chunk_len);
    const TIn* row = p.x + o * p.n;  // (n)
    if (p.op == ReduceOp::Sum) {
      float acc = 0.0f;
      for (int64_t k = begin + lane; k < end; k += group_size) acc += to_float(row[k]);
      acc = kWarpPerRow ? warp_sum(acc) : block_sum(acc, scratch_v);
      if (lane == 0) p.values[r] = from_float<TOut>(acc);
    } else {
      Best best = no_best();
      for (int64_t k = begin + lane; k < end; k += group_size)
        scan_add(best, to_float(row[k]), p.x_index ? p.x_index[o * p.n + k] : k);
      best = kWarpPerRow ? warp_best(best) : block_best(best, scratch_v, scratch_k);
      if (lane == 0) {
        if (p.values) p.values[r] = from_float<TOut>(best.v);  // exact: v came from a TIn
        if (p.indices) p.indices[r] = best.k;
      }
    }
  }
}

constexpr int kColumnTile = kWarp;  // adjacent columns per block (blockDim.x)
constexpr int kMaxSplit = 32;       // most thread rows sharing one column (blockDim.y)

// Columns (inner > 1): block (32, split) covers 32 adjacent columns of one (outer, chunk);
// thread row y takes k = begin + y, begin + y + split, ... and the split partials combine
// in order y = 0, 1, ... Blocks stride over tiles = outer · chunks · column_tiles.
template <class TIn, class TOut>
__global__ void __launch_bounds__(1024)
    reduce_columns_kernel(ReducePass<TIn, TOut> p, int64_t column_tiles) {
  __shared__ float part_v[kMaxSplit][kColumnTile];
  __shared__ int64_t part_k[kMaxSplit][kColumnTile];
  const int64_t tiles = p.outer * p.chunks * column_tiles;
  // The trip count is uniform in the block (for __syncthreads).
  for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const int64_t run = tile / column_tiles;  // (o, c) flattened
    const int64_t o = run / p.chunks, c = run % p.chunks;
    const int64_t i = (tile % column_tiles) * kColumnTile + threadIdx.x;
    const int64_t begin = c * p.chunk_len, end = std::min(p.n, begin + p.chunk_len);
    const bool active = i < p.inner;
    float acc = 0.0f;
    Best best = no_best();
    if (active) {
      const int64_t column = o * p.n * p.inner + i;  // element k at column + k·inner
      for (int64_t k = begin + threadIdx.y; k < end; k += blockDim.y) {
        const float v = to_float(p.x[column + k * p.inner]);
        if (p.op == ReduceOp::Sum)
          acc += v;
        else
          scan_add(best, v, p.x_index ? p.x_index[column + k * p.inner] : k);
      }
    }
    part_v[threadIdx.y][threadIdx.x] = p.op == ReduceOp::Sum ? acc : best.v;
    part_k[threadIdx.y][threadIdx.x] = best.k;
    __syncthreads();
    if (threadIdx.y == 0 && active) {
      const int64_t out = run * p.inner + i;
      if (p.op == ReduceOp::Sum) {
        float total = 0.0f;
        for (int y = 0; y < static_cast<int>(blockDim.y); ++y) total += part_v[y][threadIdx.x];
        p.values[out] = from_float<TOut>(total);
      } else {
        // Thread rows interleave along n, so their partials need the full order (index ties).
        for (int y = 1; y < static_cast<int>(blockDim.y); ++y)
          best = better_of(best, Best{part_v[y][threadIdx.x], part_k[y][threadIdx.x]});
        if (p.values) p.values[out] = from_float<TOut>(best.v);
        if (p.indices) p.indices[out] = best.k;
      }
    }
    __syncthreads();  // part_* is rewritten by the next tile
  }
}

// Sum over columns in 16-byte runs: the layout, chunks, split and per-column order of
// reduce_columns_kernel (so the same bits), but a thread owns kRun = kVec<TIn> adjacent
// columns and reads them with one 16-byte load, and a block covers kColumnTile runs. Taken
// for Sum where inner is a multiple of kRun and x is 16-byte aligned (a bias gradient: the
// 2-byte loads of the column kernel left it at about 0.7 TB/s).
template <class TIn, class TOut>
__global__ void __launch_bounds__(1024)
    sum_column_runs_kernel(ReducePass<TIn, TOut> p, int64_t run_tiles) {
  constexpr int kRun = kVec<TIn>;
  __shared__ float part[kMaxSplit][kColumnTile * kRun];
  const int64_t tiles = p.outer * p.chunks * run_tiles;
  for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {  // uniform in the block
    const int64_t run = tile / run_tiles;                             // (o, c) flattened
    const int64_t o = run / p.chunks, c = run % p.chunks;
    const int64_t i = ((tile % run_tiles) * kColumnTile + threadIdx.x) * kRun;  // first column
    const int64_t begin = c * p.chunk_len, end = std::min(p.n, begin + p.chunk_len);
    const bool active = i < p.inner;
    float acc[kRun] = {};
    if (active) {
      const TIn* column = p.x + o * p.n * p.inner + i;  // element k at column + k·inner
      for (int64_t k = begin + threadIdx.y; k < end; k += blockDim.y) {
        const Vec16<TIn> v = *reinterpret_cast<const Vec16<TIn>*>(column + k * p.inner);
#pragma unroll
        for (int e = 0; e < kRun; ++e) acc[e] += to_float(v.v[e]);
      }
    }
#pragma unroll
    for (int e = 0; e < kRun; ++e) part[threadIdx.y][threadIdx.x * kRun + e] = acc[e];
    __syncthreads();
    // Thread row 0 finishes columns threadIdx.x + j·kColumnTile of the tile (coalesced).
    if (threadIdx.y == 0)
      for (int j = 0; j < kRun; ++j) {
        const int local = j * kColumnTile + threadIdx.x;
        const int64_t column = (tile % run_tiles) * kColumnTile * kRun + local;
        if (column >= p.inner) continue;
        float total = 0.0f;
        for (int y = 0; y < static_cast<int>(blockDim.y); ++y) total += part[y][local];
        p.values[run * p.inner + column] = from_float<TOut>(total);
      }
    __syncthreads();  // part is rewritten by the next tile
  }
}

// grad_x[o, index[o, i], i] = grad[o, i]: one thread per (o, i); grad_x is zero-filled.
template <class T>
__global__ void scatter_along_dim_kernel(const T* grad, const int64_t* index, int64_t outer,
                                         int64_t n, int64_t inner, T* grad_x) {
  const int64_t count = outer * inner;
  for (int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; j < count;
       j += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t o = j / inner, i = j % inner, k = index[j];
    if (k >= 0 && k < n) grad_x[(o * n + k) * inner + i] = grad[j];  // index comes from argmax
  }
}

constexpr int64_t kWarpRowLimit = 1024;  // runs up to this length take a warp each
// Threads that keep every SM of an H100/H200 busy (132 SMs × 2048 resident threads).
constexpr int64_t kBusyThreads = 132 * 2048;
// Blocks worth splitting n for: about four per SM.
constexpr int64_t kTargetBlocks = 132 * 4;
constexpr int64_t kMinRowChunk = 4096;    // shortest row chunk: ≥ 4 elements per thread of 1024
constexpr int64_t kMinColumnChunk = 256;  // shortest column chunk: ≥ 8 elements per thread row

// Threads of one block per row: a power of two from 32 to 1024 giving each thread about 8
// or more elements, so short rows do not leave most of a large block idle.
int block_threads_for_row(int64_t n) {
  int threads = kWarp;
  while (threads < 1024 && static_cast<int64_t>(threads) * 8 < n) threads *= 2;
  return threads;
}

// Chunks to cut n into: 1 when `blocks` (one per output group) already fill the GPU,
// else enough for about kTargetBlocks blocks, no chunk shorter than min_chunk.
int64_t chunks_for(int64_t blocks, int64_t n, int64_t min_chunk) {
  if (blocks >= kTargetBlocks || n < 2 * min_chunk) return 1;
  return std::min(ceil_div(kTargetBlocks, blocks), n / min_chunk);
}

template <class TIn, class TOut>
void launch_pass(const ReducePass<TIn, TOut>& p, cudaStream_t stream) {
  const int64_t runs = p.outer * p.chunks;
  if (p.inner == 1 && p.chunk_len <= kWarpRowLimit) {
    constexpr int kThreads = kWarpRowsPerBlock * kWarp;
    reduce_rows_kernel<TIn, TOut, true>
        <<<grid_for(runs * kWarp, kThreads), kThreads, 0, stream>>>(p);
    CUDA_CHECK_LAUNCH("reduce_rows_kernel (warp per row)");
  } else if (p.inner == 1) {
    reduce_rows_kernel<TIn, TOut, false>
        <<<grid_for(runs, 1), block_threads_for_row(p.chunk_len), 0, stream>>>(p);
    CUDA_CHECK_LAUNCH("reduce_rows_kernel (block per row)");
  } else {
    const int64_t column_tiles = ceil_div(p.inner, kColumnTile);
    const int64_t tiles = runs * column_tiles;
    // Split each chunk over more thread rows while the tiles alone leave the GPU idle,
    // never beyond the chunk's length.
    int split = 1;
    while (split < kMaxSplit && split < p.chunk_len && tiles * kColumnTile * split < kBusyThreads)
      split *= 2;
    constexpr int kRun = kVec<TIn>;
    if (p.op == ReduceOp::Sum && p.inner % kRun == 0 && aligned16({p.x})) {
      const int64_t run_tiles = ceil_div(p.inner / kRun, static_cast<int64_t>(kColumnTile));
      sum_column_runs_kernel<TIn, TOut>
          <<<grid_for(runs * run_tiles, 1), dim3(kColumnTile, split), 0, stream>>>(p, run_tiles);
      CUDA_CHECK_LAUNCH("sum_column_runs_kernel");
      return;
    }
    reduce_columns_kernel<TIn, TOut>
        <<<grid_for(tiles, 1), dim3(kColumnTile, split), 0, stream>>>(p, column_tiles);
    CUDA_CHECK_LAUNCH("reduce_columns_kernel");
  }
}

}  // namespace

void reduce_forward_cuda(ReduceOp op, const Tensor& x, int64_t outer, int64_t n, int64_t inner,
                         const Tensor& out) {
  if (outer * inner == 0) return;
  MICROLLM_CHECK(x.is_contiguous() && out.is_contiguous(), "reduce",
                 "CUDA kernels take dense tensors, found x ", x.describe(), " out ",
                 out.describe());
  MICROLLM_CHECK(op != ReduceOp::Argmax || out.dtype() == DType::I64, "reduce",
                 "argmax writes i64 indices, found ", out.describe());
  MICROLLM_CHECK(op == ReduceOp::Argmax || out.dtype() == x.dtype(), "reduce", "out ",
                 out.describe(), " must have the dtype of x ", x.describe());
  MICROLLM_CHECK(n > 0 || op == ReduceOp::Sum, "reduce",
                 "cannot take max over an empty dimension of ", x.describe());
  const cudaStream_t stream = stream_of(x);
  dispatch_cuda_float(x.dtype(), "reduce", [&](auto tag) {
    using T = decltype(tag);
    T* values = op == ReduceOp::Argmax ? nullptr : ptr<T>(out);
    int64_t* indices = op == ReduceOp::Argmax ? ptr<int64_t>(out) : nullptr;
    // Blocks a single pass would have: one per row (long rows) or per 32-column tile.
    const int64_t blocks = inner == 1 ? (n > kWarpRowLimit ? outer : kTargetBlocks)
                                      : outer * ceil_div(inner, kColumnTile);
    int64_t chunks = chunks_for(blocks, n, inner == 1 ? kMinRowChunk : kMinColumnChunk);
    if (chunks <= 1) {
      launch_pass(
          ReducePass<T, T>{op, ptr<const T>(x), nullptr, outer, n, inner, n, 1, values, indices},
          stream);
      return;
    }
    const int64_t chunk_len = ceil_div(n, chunks);
    chunks = ceil_div(n, chunk_len);  // every chunk non-empty
    // F32 partials (and, for Max/Argmax, their indices: the first-occurrence rule needs them).
    Tensor part_v =
        Tensor::empty({outer, chunks, inner}, DType::F32, x.device());  // (outer, chunks, inner)
    Tensor part_k;  // (outer, chunks, inner) i64
    if (op != ReduceOp::Sum) part_k = Tensor::empty({outer, chunks, inner}, DType::I64, x.device());
    int64_t* part_k_ptr = part_k.defined() ? ptr<int64_t>(part_k) : nullptr;
    launch_pass(ReducePass<T, float>{op, ptr<const T>(x), nullptr, outer, n, inner, chunk_len,
                                     chunks, ptr<float>(part_v), part_k_ptr},
                stream);
    launch_pass(ReducePass<float, T>{op, ptr<const float>(part_v), part_k_ptr, outer, chunks, inner,
                                     chunks, 1, values, indices},
                stream);
  });
}

void scatter_along_dim_cuda(const Tensor& grad, const Tensor& index, int64_t outer, int64_t n,
                            int64_t inner, const Tensor& grad_x) {
  const int64_t count = outer * inner;
  if (count == 0) return;
  MICROLLM_CHECK(grad.is_contiguous() && index.is_contiguous() && grad_x.is_contiguous(), "max",
                 "CUDA scatter takes dense tensors, found grad ", grad.describe(), " index ",
                 index.describe(), " grad_x ", grad_x.describe());
  MICROLLM_CHECK(index.dtype() == DType::I64 && grad.dtype() == grad_x.dtype(), "max",
                 "scatter takes i64 indices and grad, grad_x of one dtype, found ",
                 index.describe(), ", ", grad.describe(), ", ", grad_x.describe());
  constexpr int kThreads = 256;
  dispatch_cuda_float(grad.dtype(), "max", [&](auto tag) {
    using T = decltype(tag);
    scatter_along_dim_kernel<T><<<grid_for(count, kThreads), kThreads, 0, stream_of(grad_x)>>>(
        ptr<const T>(grad), ptr<const int64_t>(index), outer, n, inner, ptr<T>(grad_x));
    CUDA_CHECK_LAUNCH("scatter_along_dim_kernel");
  });
}

}  // namespace microllm::ops
