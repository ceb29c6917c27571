// gemv_out on CUDA: the decode projection y (M, N) = x (M, K) · Wᵀ for M ≤ 8 rows, streaming
// W (N, K) row-major (Hugging Face orientation) at close to the copy bandwidth. At M ≤ 8 a
// GEMM does 2·M FLOPs per 2 bytes of BF16 weight, far below where the H200 stops being
// bandwidth bound, so the kernel's job is to keep enough bytes of W in flight
// (dev/cuda/gemv_bf16.cu variant 3 measured the design):
//   - one warp per output row n (with swiglu: per pair of rows n, F + n, so the epilogue has
//     both), 8 warps per block; lanes read 16-byte groups of W, kLoads of them issued back
//     to back before any arithmetic; W is read once for all M rows of x, with evict-first
//     loads (W is used once; x, re-read by every warp, stays in cache);
//   - when N alone gives too few warps to fill the GPU, the K of a row is split over `splits`
//     warps of a block and the slices are added in slice order in shared memory.
// Every output element's sum has one order fixed by (N, K) alone — never by M — so a row
// gives the same bits alone or with others. No atomics.
#include <type_traits>

#include "../cuda_common.cuh"
#include "matmul_kernels.h"
#include "microllm/ops/matmul.h"

namespace microllm::ops {
namespace {

using namespace cuda_detail;

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * kWarp;
constexpr int kLoads = 4;               // 16-byte loads of W per lane in flight
constexpr int kMaxSplits = kWarps;      // K slices of one row
constexpr int64_t kTargetWarps = 4096;  // ~31 warps per SM of a 132-SM H200
static_assert(kGemvMaxRows == 8, "the kernels are built for up to 8 rows");

// Σ a[i]·b[i] over the elements of two 16-byte groups, in F32, left to right.
template <class T>
__device__ __forceinline__ float dot16(const uint4& a, const uint4& b) {
  float s = 0.0f;
  if constexpr (std::is_same_v<T, float>) {
    const float* fa = reinterpret_cast<const float*>(&a);
    const float* fb = reinterpret_cast<const float*>(&b);
#pragma unroll
    for (int i = 0; i < 4; ++i) s = fmaf(fa[i], fb[i], s);
  } else {
    const T* ta = reinterpret_cast<const T*>(&a);
    const T* tb = reinterpret_cast<const T*>(&b);
#pragma unroll
    for (int i = 0; i < 8; ++i) s = fmaf(to_float(ta[i]), to_float(tb[i]), s);
  }
  return s;
}

__device__ __forceinline__ float sigmoid(float v) { return 1.0f / (1.0f + expf(-v)); }

// x (M, K), w (N, K) or (2N, K) with kSwiglu, bias (N) or null, y (M, N); M ≤ kRows.
template <class T, int kRows, bool kSwiglu>
__global__ void __launch_bounds__(kThreads)
    gemv_kernel(const T* x, const T* w, const T* bias, T* y, int M, int N, int K, int splits) {
  constexpr int kParts = kSwiglu ? 2 : 1;           // weight rows per output row
  __shared__ float partial[kParts][kWarps][kRows];  // each warp's sums over its K slice
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int rows_per_block = kWarps / splits;
  const int64_t first_row = static_cast<int64_t>(blockIdx.x) * rows_per_block;
  const int64_t n = first_row + warp / splits;
  const int slice = warp % splits;
  const int groups = K / kVec<T>;  // 16-byte groups per row
  const int per_slice = (groups + splits - 1) / splits;
  const int begin = slice * per_slice, end = min(groups, begin + per_slice);
  float acc[kParts][kRows] = {};
  const uint4* w_rows[kParts];       // (K/V) each
  const int64_t wn = n < N ? n : 0;  // warps past N load nothing
  w_rows[0] = reinterpret_cast<const uint4*>(w + wn * K);
  if constexpr (kSwiglu) w_rows[1] = reinterpret_cast<const uint4*>(w + (N + wn) * K);
  uint4 wv[kParts][kLoads];  // one pass of loads, all issued before the first is used
  auto load_pass = [&](int g0) {
#pragma unroll
    for (int p = 0; p < kParts; ++p)
#pragma unroll
      for (int u = 0; u < kLoads; ++u) {
        const int g = g0 + u * kWarp;
        wv[p][u] = g < end ? __ldcs(w_rows[p] + g) : make_uint4(0, 0, 0, 0);
      }
  };
  // The first pass of W is loaded before the wait for the previous kernel (W is a weight,
  // which no kernel of the step writes): with programmatic launch it streams in while that
  // kernel finishes.
  if (n < N) load_pass(begin + lane);
  enter_dependent_grid();
  if (n < N) {  // no early return: the whole block meets at __syncthreads below
    const uint4* x_groups = reinterpret_cast<const uint4*>(x);  // (M, K/V)
    for (int g0 = begin + lane; g0 < end; g0 += kWarp * kLoads) {
      if (g0 != begin + lane) load_pass(g0);
#pragma unroll
      for (int u = 0; u < kLoads; ++u) {
        const int g = g0 + u * kWarp;
        if (g >= end) break;
#pragma unroll
        for (int m = 0; m < kRows; ++m) {
          if (m >= M) break;
          const uint4 xv = __ldg(x_groups + static_cast<int64_t>(m) * groups + g);
#pragma unroll
          for (int p = 0; p < kParts; ++p) acc[p][m] += dot16<T>(xv, wv[p][u]);
        }
      }
    }
  }
#pragma unroll
  for (int p = 0; p < kParts; ++p)
#pragma unroll
    for (int m = 0; m < kRows; ++m) {
      const float total = warp_sum(acc[p][m]);
      if (lane == 0) partial[p][warp][m] = total;
    }
  __syncthreads();
  // One thread per (row of the block, row of x) adds the slices in order; the epilogue.
  const int t = threadIdx.x;
  if (t >= rows_per_block * kRows) return;
  const int r = t / kRows, m = t % kRows;
  const int64_t out_row = first_row + r;
  if (m >= M || out_row >= N) return;
  float sum[kParts];
#pragma unroll
  for (int p = 0; p < kParts; ++p) {
    sum[p] = partial[p][r * splits][m];
    for (int s = 1; s < splits; ++s) sum[p] += partial[p][r * splits + s][m];
  }
  T* out = y + static_cast<int64_t>(m) * N + out_row;
  if constexpr (kSwiglu) {
    // Rounded as swiglu_out(linear(gate), linear(up)): g and u to T, then silu(g)·u.
    const float g = to_float(from_float<T>(sum[0])), u = to_float(from_float<T>(sum[1]));
    *out = from_float<T>(g * sigmoid(g) * u);
  } else {
    *out = from_float<T>(bias ? sum[0] + to_float(bias[out_row]) : sum[0]);
  }
}

// Split-K factor for N output rows of K elements: double while the grid is short of
// kTargetWarps and each slice keeps at least two warp-wide passes.
int splits_for(int64_t N, int64_t groups) {
  int splits = 1;
  while (splits < kMaxSplits && N * splits < kTargetWarps && groups / (2 * splits) >= 2 * kWarp)
    splits *= 2;
  return splits;
}

template <class Fn>
void dispatch_rows(int64_t M, Fn&& fn) {
  if (M <= 1) return fn(std::integral_constant<int, 1>{});
  if (M <= 2) return fn(std::integral_constant<int, 2>{});
  if (M <= 4) return fn(std::integral_constant<int, 4>{});
  return fn(std::integral_constant<int, 8>{});
}

}  // namespace

void gemv_cuda(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& out,
               bool swiglu) {
  const int64_t M = x.size(0), K = x.size(1), N = out.size(1);
  MICROLLM_CHECK(N <= INT32_MAX && K <= INT32_MAX, "gemv_out", "sizes too large: N ", N, " K ", K);
  cudaStream_t stream = stream_of(out);
  dispatch_cuda_float(x.dtype(), "gemv_out", [&](auto tag) {
    using T = decltype(tag);
    const int splits = splits_for(N, K / kVec<T>);
    const auto blocks = static_cast<unsigned>(ceil_div(N, kWarps / splits));
    const T* b = bias.defined() ? ptr<const T>(bias) : nullptr;
    dispatch_rows(M, [&](auto rows) {
      constexpr int kRows = decltype(rows)::value;
      const auto kernel = swiglu ? gemv_kernel<T, kRows, true> : gemv_kernel<T, kRows, false>;
      launch_dependent("gemv_kernel", kernel, dim3(blocks), dim3(kThreads), 0, stream,
                       ptr<const T>(x), ptr<const T>(weight), swiglu ? nullptr : b, ptr<T>(out),
                       static_cast<int>(M), static_cast<int>(N), static_cast<int>(K), splits);
    });
  });
}

}  // namespace microllm::ops
