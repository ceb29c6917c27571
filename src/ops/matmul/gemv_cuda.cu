// gemv_out on CUDA: the decode projection y (M, N) = x (M, K) · Wᵀ for M ≤ kGemvMaxRows rows,
// streaming W (N, K) row-major (Hugging Face orientation) at close to the copy bandwidth. At
// M ≤ 8 a GEMM does 2·M FLOPs per 2 bytes of BF16 weight, below where the H200 stops being
// bandwidth bound, so a kernel's job is to keep enough bytes of W in flight. Two kernels
// share the fusions of gemv_fusion.cuh:
//   - BF16/F16 calls of 5–8 rows (or GemvFusion::kernel_rows): gemv_tensor_core_cuda.cu, one
//     warp per 8 output rows on mma.sync (MICROLLM_GEMV_ENGINE=cuda_cores sends them to the
//     kernel below instead);
//   - F32 calls and calls of 1–4 rows, here: one warp per output row n on the CUDA cores
//     (with swiglu: per pair of rows n, F + n, so the epilogue has both), 8 warps per block; lanes
//     read 16-byte groups of W, kLoads of them issued back to back before any arithmetic; W is read
//     once for all M rows of x, with evict-first loads (W is used once; x, re-read by every warp,
//     stays in cache); when N alone gives too few warps to fill the GPU, the K of a row is
//     split over `splits` warps of a block and the slices are added in slice order in
//     shared memory (dev/cuda/gemv_bf16.cu variant 3 measured the design).
// Both are launched as dependent grids (src/cuda/dependent_launch.cuh): each warp's first
// pass of W is in flight before the kernel waits for the one that wrote x; in the CUDA-core
// kernel, where the caller allows it (GemvFusion::early_inputs), so are the first row group's
// bias, residual, rope positions, slots and frequencies and the norm weight, which would
// otherwise add memory latencies after the wait (H100 decode: 1.04× at batch 1). Fused around the
// product (GemvFusion): an RMSNorm prologue, where every block normalizes the M rows of x
// into shared memory in the norm kernel's order of sums (a row is 1–6 KB, so repeating it
// per block costs less than a kernel boundary), and a residual add in the epilogue (in place
// allowed: one thread reads and writes each element), or the rope_kv_write epilogue over
// the QKV projection: a warp computes the pairs of rows (h·D + i, h·D + i + D/2) that one
// RoPE rotation needs, as the swiglu epilogue computes its (gate, up) pairs.
// In each kernel every output element's sum has one order fixed by (N, K) alone — never by
// M — so a row gives the same bits alone or with others in the same range of M. No atomics.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <type_traits>
#include <utility>

#include "../rms_norm/rms_norm_kernels.h"
#include "gemv_fusion.cuh"
#include "matmul_kernels.h"
#include "microllm/core/switch.h"
#include "microllm/ops/matmul.h"

namespace microllm::ops {
namespace {

using namespace gemv_detail;

// Calls of at most this many rows (and every F32 call) take the CUDA-core kernel, larger
// BF16/F16 calls the tensor-core kernel (docs/optimization-log.md).
constexpr int64_t kGemvCudaCoreRows = 4;
constexpr int kLoads = 4;               // 16-byte loads of W per lane in flight
constexpr int kMaxSplits = kGemvWarps;  // K slices of one row
constexpr int64_t kTargetWarps = 4096;  // ~31 warps per SM of a 132-SM H200
static_assert(kGemvMaxRows == 8, "the CUDA-core kernel is built for up to 8 rows");

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

// M ≤ kRows rows; kEpi: the epilogue; kNorm: the norm prologue, with M · K / kVec<T>
// 16-byte groups of dynamic shared memory. The grid is at most what fits on the GPU at once;
// block b serves the groups of output rows b, b + gridDim.x, ... (so the prologue runs once
// per block, and a row's sums do not depend on the grid).
// Blocks an SM each instance is built for (registers of 256 threads: 5 → 48, 4 → 64, 3 → 80,
// 2 → 128), the counts ptxas gives the kernel without the early inputs: the plain product at
// one row streams the LM head at 5 blocks an SM.
template <int kRows, int kEpi, bool kNorm>
constexpr int gemv_min_blocks() {
  if (kEpi == kPlain) return kRows == 1 && !kNorm ? 5 : 4;
  return kRows <= 2 ? 3 : 2;
}

template <class T, int kRows, int kEpi, bool kNorm>
__global__ void __launch_bounds__(kGemvThreads, gemv_min_blocks<kRows, kEpi, kNorm>())
    gemv_kernel(GemvParams<T> p) {
  constexpr int kParts = kEpi == kPlain ? 1 : 2;        // weight rows per output row
  __shared__ float partial[kParts][kGemvWarps][kRows];  // each warp's sums over its K slice
  __shared__ float scratch[kNormScratch];               // the prologue's warp sums
  extern __shared__ uint4 normed[];                     // (M, K/V) with kNorm
  const int M = p.M, N = p.N, K = p.K, splits = p.splits;
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int rows_per_block = kGemvWarps / splits;
  const int64_t row_groups = (N + rows_per_block - 1) / rows_per_block;
  const int slice = warp % splits;
  const int groups = K / kVec<T>;  // 16-byte groups per row
  const int per_slice = (groups + splits - 1) / splits;
  const int begin = slice * per_slice, end = min(groups, begin + per_slice);
  uint4 wv[kParts][kLoads];         // one pass of loads, all issued before the first is used
  const uint4* w_rows[kParts];      // (K/V) each: the weight rows of this warp's output row
  auto point_at = [&](int64_t n) {  // n < N
#pragma unroll
    for (int q = 0; q < kParts; ++q)
      w_rows[q] = reinterpret_cast<const uint4*>(p.w + weight_row<T, kEpi>(p, n, q) * K);
  };
  auto load_pass = [&](int g0) {
#pragma unroll
    for (int q = 0; q < kParts; ++q)
#pragma unroll
      for (int u = 0; u < kLoads; ++u) {
        const int g = g0 + u * kWarp;
        wv[q][u] = g < end ? __ldcs(w_rows[q] + g) : make_uint4(0, 0, 0, 0);
      }
  };
  // The first pass of W is loaded before the wait for the previous kernel (W is a weight,
  // which no kernel of the step writes): with programmatic launch it streams in while that
  // kernel finishes.
  const int64_t first_n = static_cast<int64_t>(blockIdx.x) * rows_per_block + warp / splits;
  if (first_n < N) {
    point_at(first_n);
    load_pass(begin + lane);
  }
  // With p.early_inputs the first row group's epilogue inputs (for the thread that will
  // finish each of its rows) and, at one row, the norm weight are loaded before the wait too
  // (with more rows its 16 bytes a thread spill the prologue's registers).
  const int t = threadIdx.x;
  EpilogueInputs<kEpi> first_inputs;
  if (p.early_inputs) {
    if (splits == 1) {
      if (first_n < N && lane < M) first_inputs = load_epilogue_inputs<T, kEpi>(p, first_n, lane);
    } else {
      const int64_t n = static_cast<int64_t>(blockIdx.x) * rows_per_block + t / kRows;
      if (t < rows_per_block * kRows && t % kRows < M && n < N)
        first_inputs = load_epilogue_inputs<T, kEpi>(p, n, t % kRows);
    }
  }
  constexpr bool kEarlyNormWeights = kNorm && kRows == 1;
  Vec16<T> norm_weights[1];
  if (kEarlyNormWeights && p.early_inputs) load_norm_weights(p, 0, norm_weights);
  enter_dependent_grid();
  if constexpr (kNorm)  // kBatch 1: 80 registers at M = 1
    normalize_rows<1, kRows>(p, normed, scratch, norm_weights, kEarlyNormWeights && p.early_inputs);
  // x's groups: the normalized rows in shared memory, or x itself (staging x in shared memory
  // as the tensor-core kernel does measured slower here: docs/optimization-log.md).
  const uint4* x_groups = kNorm ? normed : reinterpret_cast<const uint4*>(p.x);  // (M, K/V)
  for (int64_t row_group = blockIdx.x; row_group < row_groups; row_group += gridDim.x) {
    const int64_t first_row = row_group * rows_per_block;
    const int64_t n = first_row + warp / splits;
    float acc[kParts][kRows] = {};
    if (n < N) {  // no early exit: the whole block meets at __syncthreads below
      if (row_group != blockIdx.x) {
        point_at(n);
        load_pass(begin + lane);
      }
      for (int g0 = begin + lane; g0 < end; g0 += kWarp * kLoads) {
        if (g0 != begin + lane) load_pass(g0);
#pragma unroll
        for (int u = 0; u < kLoads; ++u) {
          const int g = g0 + u * kWarp;
          if (g >= end) break;
#pragma unroll
          for (int m = 0; m < kRows; ++m) {
            if (m >= M) break;
            const int64_t at = static_cast<int64_t>(m) * groups + g;
            const uint4 xv = kNorm ? x_groups[at] : __ldg(x_groups + at);
#pragma unroll
            for (int q = 0; q < kParts; ++q) acc[q][m] += dot16<T>(xv, wv[q][u]);
          }
        }
      }
    }
    if (splits == 1) {
      // The warp holds whole rows: lane m finishes row m of x, with no block barrier, so the
      // warps of a block stream their next rows independently.
      float total[kParts][kRows];
#pragma unroll
      for (int q = 0; q < kParts; ++q)
#pragma unroll
        for (int m = 0; m < kRows; ++m) total[q][m] = warp_sum(acc[q][m]);
      if (n < N && lane < M) {
        float sum[kParts];
#pragma unroll
        for (int q = 0; q < kParts; ++q) {
          sum[q] = total[q][0];
#pragma unroll
          for (int m = 1; m < kRows; ++m)
            if (m == lane) sum[q] = total[q][m];
        }
        finish_row<T, kEpi>(p, n, lane, sum,
                            p.early_inputs && row_group == blockIdx.x
                                ? first_inputs
                                : load_epilogue_inputs<T, kEpi>(p, n, lane));
      }
      continue;
    }
#pragma unroll
    for (int q = 0; q < kParts; ++q)
#pragma unroll
      for (int m = 0; m < kRows; ++m) {
        const float total = warp_sum(acc[q][m]);
        if (lane == 0) partial[q][warp][m] = total;
      }
    __syncthreads();
    // One thread per (row of the block, row of x) adds the slices in order; the epilogue.
    const int r = t / kRows, m = t % kRows;
    const int64_t out_row = first_row + r;
    if (t < rows_per_block * kRows && m < M && out_row < N) {
      float sum[kParts];
#pragma unroll
      for (int q = 0; q < kParts; ++q) {
        sum[q] = partial[q][r * splits][m];
        for (int s = 1; s < splits; ++s) sum[q] += partial[q][r * splits + s][m];
      }
      finish_row<T, kEpi>(p, out_row, m, sum,
                          p.early_inputs && row_group == blockIdx.x
                              ? first_inputs
                              : load_epilogue_inputs<T, kEpi>(p, out_row, m));
    }
    __syncthreads();  // partial is rewritten by the next row group
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

template <class T>
void launch_gemv_cuda_cores(const GemvParams<T>& p, int epi, bool norm, cudaStream_t stream) {
  const int64_t blocks = ceil_div(static_cast<int64_t>(p.N), kGemvWarps / p.splits);
  const size_t shared = norm ? static_cast<size_t>(p.M) * (p.K / kVec<T>)*sizeof(uint4) : 0;
  dispatch_rows(p.M, [&](auto rows) {
    constexpr int kRows = decltype(rows)::value;
    auto pick = [&](auto epilogue) {
      constexpr int kE = decltype(epilogue)::value;
      return norm ? gemv_kernel<T, kRows, kE, true> : gemv_kernel<T, kRows, kE, false>;
    };
    const auto kernel = epi == kSwiglu ? pick(std::integral_constant<int, kSwiglu>{})
                        : epi == kRope ? pick(std::integral_constant<int, kRope>{})
                                       : pick(std::integral_constant<int, kPlain>{});
    launch_dependent("gemv_kernel", kernel,
                     dim3(static_cast<unsigned>(std::min<int64_t>(
                         blocks, resident_blocks(reinterpret_cast<const void*>(kernel), shared)))),
                     dim3(kGemvThreads), shared, stream, p);
  });
}

// The tensor-core kernel, unless MICROLLM_GEMV_ENGINE is "cuda_cores" (for measurements:
// then every call takes the CUDA-core kernel).
bool gemv_tensor_cores_enabled() {
  static const bool enabled = [] {
    const char* env = std::getenv("MICROLLM_GEMV_ENGINE");
    return env == nullptr || std::strcmp(env, "cuda_cores") != 0;
  }();
  return enabled;
}

// Whether calls that allow it (GemvFusion::early_inputs) load their epilogue inputs and norm
// weight before the wait: unless MICROLLM_GEMV_EARLY_INPUTS=0 (read at each call, so tests can
// set it).
bool early_inputs_enabled() { return !switch_off("MICROLLM_GEMV_EARLY_INPUTS"); }

}  // namespace

void gemv_cuda(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& out,
               const GemvFusion& fusion) {
  // Output rows of the kernel: out's columns, or with rope the pairs of QKV columns.
  const int64_t M = x.size(0), K = x.size(1),
                N = fusion.epilogue == GemvEpilogue::rope_kv_write ? weight.size(0) / 2
                                                                   : out.size(1);
  cudaStream_t stream = stream_of(x);
  MICROLLM_CHECK(N <= INT32_MAX && K <= INT32_MAX, "gemv_out", "sizes too large: N ", N, " K ", K);
  const bool norm = fusion.norm_weight.defined();
  const GemvRopeKvWrite& rope = fusion.rope;
  const int epi = fusion.epilogue == GemvEpilogue::swiglu          ? kSwiglu
                  : fusion.epilogue == GemvEpilogue::rope_kv_write ? kRope
                                                                   : kPlain;
  dispatch_cuda_float(x.dtype(), "gemv_out", [&](auto tag) {
    using T = decltype(tag);
    const int64_t groups = K / kVec<T>;
    const int64_t kernel_rows = fusion.kernel_rows > 0 ? fusion.kernel_rows : M;
    const bool tensor_cores =
        !std::is_same_v<T, float> && kernel_rows > kGemvCudaCoreRows && gemv_tensor_cores_enabled();
    GemvParams<T> p{};
    p.x = ptr<const T>(x);
    p.w = ptr<const T>(weight);
    p.bias = bias.defined() ? ptr<const T>(bias) : nullptr;
    p.norm_weight = norm ? ptr<const T>(fusion.norm_weight) : nullptr;
    p.residual = fusion.residual.defined() ? ptr<const T>(fusion.residual) : nullptr;
    p.y = out.defined() ? ptr<T>(out) : nullptr;
    p.eps = static_cast<float>(fusion.norm_eps);
    p.M = static_cast<int>(M);
    p.N = static_cast<int>(N);
    p.K = static_cast<int>(K);
    // The split of the (N, K) product the unfused call would make (with rope: of all 2N
    // QKV rows), so that the fused epilogues keep its bits.
    const int64_t product_rows = epi == kRope ? 2 * N : N;
    if (tensor_cores) {
      const TensorCoreSplit split = tensor_core_split(product_rows, groups);
      p.splits = split.warps;
      p.cluster_blocks = split.blocks;
    } else {
      p.splits = splits_for(product_rows, groups);
      p.cluster_blocks = 1;
    }
    p.norm_threads = norm ? static_cast<int>(rms_norm_forward_threads(groups)) : 0;
    p.early_inputs = fusion.early_inputs && early_inputs_enabled();
    if (epi == kRope)
      p.rope = RopeTargets<T>{ptr<const int32_t>(rope.positions),
                              ptr<const float>(rope.inv_freq),
                              ptr<const int32_t>(rope.slot_mapping),
                              ptr<T>(rope.q_out),
                              ptr<T>(rope.k_out),
                              rope.k_cache.raw_data(),
                              rope.v_cache.raw_data(),
                              rope.k_cache.dtype() == DType::BF16,
                              static_cast<int>(rope.q_out.size(1)),
                              static_cast<int>(rope.k_cache.size(2)),
                              static_cast<int>(rope.k_cache.size(3))};
    if constexpr (!std::is_same_v<T, float>)  // no F32 tensor-core kernel is instantiated
      if (tensor_cores) return launch_gemv_tensor_core(p, epi, norm, stream);
    launch_gemv_cuda_cores(p, epi, norm, stream);
  });
}

}  // namespace microllm::ops
