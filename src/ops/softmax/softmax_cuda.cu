// CUDA softmax / log-softmax over the last dimension, forward and backward. F32/BF16/F16
// storage, F32 arithmetic. Reference: softmax_cpu.cpp (torch.softmax / log_softmax).
//
// Layout: rows (R, N) dense, row r at r·N. A block per row, or a warp per row when one warp
// is enough for it (8 rows per block, no block-wide synchronization); groups stride over rows:
//   forward  pass 1  running (max m, Σ exp(x − m)) per thread, rescaled when m grows
//                    ("online softmax", Milakov & Gimelshein 2018), so x is read twice,
//                    not three times, then block_max / block_sum (fixed order);
//            pass 2  y = exp(x − M)/S, or log y = (x − M) − log S.
//   backward pass 1  Σ dy·y (softmax) or Σ dy (log-softmax) by block_sum;
//            pass 2  dx = y·(dy − Σ dy·y), or dx = dy − exp(y)·Σ dy.
// Masked entries (−inf) add nothing to the sum and get probability 0 while the row has a
// finite entry; a row with no finite entry gives NaN, as on the CPU.
#include <cmath>
#include <cstdint>

#include "../cuda_common.cuh"
#include "../row_reduce.cuh"
#include "softmax_kernels.h"

namespace microllm::ops {
namespace {

using namespace cuda_detail;

constexpr int kWarpRowsPerBlock = 8;  // 256-thread blocks when each row takes one warp
// Most threads per block of a kernel: the warp-per-row launch uses 256, the block-per-row
// launch up to 1024 (a tighter bound lets the warp kernels keep more registers).
constexpr int max_threads(bool warp_per_row) {
  return warp_per_row ? kWarpRowsPerBlock * kWarp : 1024;
}

// Occupancy floors: 4 warp-per-row blocks per SM let ptxas use up to 64 registers (without
// a floor it squeezes the F32 variant into 32 and spills); 2 block-per-row blocks of 1024
// keep it at 32, two blocks per SM, which measured 25% faster on vocabulary rows than 1.
template <class T, bool kWarpPerRow>
__global__ void __launch_bounds__(max_threads(kWarpPerRow), kWarpPerRow ? 4 : 2)
    softmax_forward_kernel(const T* x, T* y, int64_t rows, int64_t n, bool log, bool vec) {
  __shared__ float scratch[kWarp];
  const RowGroup g = row_group<kWarpPerRow>();
  // The trip count is uniform in a group, so all its threads reach the reductions.
  for (int64_t r = g.first; r < rows; r += g.stride) {
    const T* xr = x + r * n;  // (N)
    T* yr = y + r * n;        // (N)
    const RowStats st = row_stats<kWarpPerRow>(xr, n, vec, g, scratch);
    if (log) {
      const float log_sum = logf(st.sum);
      transform_row(xr, yr, n, vec, g, [&](int64_t, float v) { return (v - st.max) - log_sum; });
    } else {
      // sum ≥ 1 (the max adds exp(0)): the fast reciprocal (2 ulp) is safe and avoids the
      // IEEE division's slow-path call, whose register saves spilled to local memory.
      const float inv_sum = __fdividef(1.0f, st.sum);
      transform_row(xr, yr, n, vec, g,
                    [&](int64_t, float v) { return expf(v - st.max) * inv_sum; });
    }
  }
}

template <class T, bool kWarpPerRow>
__global__ void __launch_bounds__(max_threads(kWarpPerRow))
    softmax_backward_kernel(const T* y, const T* dy, T* dx, int64_t rows, int64_t n, bool log,
                            bool vec) {
  __shared__ float scratch[kWarp];
  const RowGroup g = row_group<kWarpPerRow>();
  for (int64_t r = g.first; r < rows; r += g.stride) {
    const T* yr = y + r * n;    // (N)
    const T* dyr = dy + r * n;  // (N)
    T* dxr = dx + r * n;        // (N)
    float part = 0.0f;          // Σ dy·y (softmax) or Σ dy (log-softmax), this thread's share
    for_each_owned(yr, dyr, n, vec, g,
                   [&](int64_t, float yv, float dyv) { part += log ? dyv : dyv * yv; });
    const float dot = group_sum<kWarpPerRow>(part, scratch);
    if (log)
      transform_row(yr, dyr, dxr, n, vec, g,
                    [&](int64_t, float yv, float dyv) { return dyv - expf(yv) * dot; });
    else
      transform_row(yr, dyr, dxr, n, vec, g,
                    [&](int64_t, float yv, float dyv) { return yv * (dyv - dot); });
  }
}

// Threads of the block for a row of `units` loads: a power of two from 32 to 1024 giving
// each thread about 8 or more, so short rows do not leave most of a large block idle.
int block_threads_for_row(int64_t units) {
  int threads = kWarp;
  while (threads < 1024 && static_cast<int64_t>(threads) * 8 < units) threads *= 2;
  return threads;
}

// Launches kernel<T, true> (a warp per row) when one warp is enough for a row of `units`
// loads, else kernel<T, false> with a block per row.
template <class WarpKernel, class BlockKernel, class... Args>
void launch_rows(WarpKernel warp_kernel, BlockKernel block_kernel, int64_t rows, int64_t units,
                 cudaStream_t stream, Args... args) {
  const int threads = block_threads_for_row(units);
  if (threads == kWarp) {
    constexpr int kThreads = kWarpRowsPerBlock * kWarp;
    warp_kernel<<<grid_for(rows * kWarp, kThreads), kThreads, 0, stream>>>(args...);
  } else {
    block_kernel<<<grid_for(rows, 1), threads, 0, stream>>>(args...);
  }
}

}  // namespace

void softmax_forward_cuda(const Tensor& x, const Tensor& y, bool log) {
  const int64_t n = x.size(-1), rows = n ? x.numel() / n : 0;
  if (rows == 0) return;
  MICROLLM_CHECK(x.is_contiguous() && y.is_contiguous() && x.dtype() == y.dtype(),
                 log ? "log_softmax" : "softmax",
                 "CUDA kernels take dense rows of one dtype, found x ", x.describe(), " y ",
                 y.describe());
  dispatch_cuda_float(x.dtype(), log ? "log_softmax" : "softmax", [&](auto tag) {
    using T = decltype(tag);
    const bool vec = n % kVec<T> == 0 && aligned16({x.raw_data(), y.raw_data()});
    launch_rows(softmax_forward_kernel<T, true>, softmax_forward_kernel<T, false>, rows,
                vec ? n / kVec<T> : n, stream_of(y), ptr<const T>(x), ptr<T>(y), rows, n, log, vec);
    CUDA_CHECK_LAUNCH("softmax_forward_kernel");
  });
}

void softmax_backward_cuda(const Tensor& y, const Tensor& dy, const Tensor& dx, bool log) {
  const int64_t n = y.size(-1), rows = n ? y.numel() / n : 0;
  if (rows == 0) return;
  MICROLLM_CHECK(y.is_contiguous() && dy.is_contiguous() && dx.is_contiguous() &&
                     y.dtype() == dy.dtype() && y.dtype() == dx.dtype(),
                 log ? "log_softmax" : "softmax",
                 "CUDA kernels take dense rows of one dtype, found y ", y.describe(), " dy ",
                 dy.describe(), " dx ", dx.describe());
  dispatch_cuda_float(y.dtype(), log ? "log_softmax" : "softmax", [&](auto tag) {
    using T = decltype(tag);
    const bool vec = n % kVec<T> == 0 && aligned16({y.raw_data(), dy.raw_data(), dx.raw_data()});
    launch_rows(softmax_backward_kernel<T, true>, softmax_backward_kernel<T, false>, rows,
                vec ? n / kVec<T> : n, stream_of(dx), ptr<const T>(y), ptr<const T>(dy), ptr<T>(dx),
                rows, n, log, vec);
    CUDA_CHECK_LAUNCH("softmax_backward_kernel");
  });
}

}  // namespace microllm::ops
