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
//     warps of a block and the slices are added in slice order in shared memory;
//   - launched as a dependent grid (src/cuda/dependent_launch.cuh): each warp's first pass
//     of W is in flight before the kernel waits for the one that wrote x;
//   - fused around the product (GemvFusion): an RMSNorm prologue, where every block
//     normalizes the M rows of x into shared memory in the norm kernel's order of sums (a
//     row is 1–6 KB, so repeating it per block costs less than a kernel boundary), and a
//     residual add in the epilogue (in place allowed: one thread reads and writes each
//     element), or the rope_kv_write epilogue over the QKV projection: a warp computes the
//     pair of rows (h·D + i, h·D + i + D/2) that one RoPE rotation needs, as the swiglu
//     epilogue computes its (gate, up) pair.
// Every output element's sum has one order fixed by (N, K) alone — never by M — so a row
// gives the same bits alone or with others. No atomics.
#include <algorithm>
#include <map>
#include <mutex>
#include <tuple>
#include <type_traits>
#include <utility>

#include "../cuda_common.cuh"
#include "../rms_norm/rms_norm_kernels.h"
#include "../rope/rope_rotate.cuh"
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

// The epilogues: kPlain (+ bias, + residual), kSwiglu (the gate/up pair of rows n, N + n),
// kRope (the pair of QKV rows h·D + i, h·D + i + D/2 of head h, rotated or not).
constexpr int kPlain = 0, kSwiglu = 1, kRope = 2;

// The rope_kv_write epilogue's targets (kv_write.h); a cache element is float or bf16.
template <class T>
struct RopeTargets {
  const int32_t* positions;  // (M)
  const float* inv_freq;     // (D/2)
  const int32_t* slots;      // (M)
  T* q_out;                  // (M, H, D)
  T* k_out;                  // (M, Hkv, D)
  void* k_cache;             // (NB, BS, Hkv, D)
  void* v_cache;
  bool cache_bf16;
  int H, Hkv, D;
};

template <class T>
struct GemvParams {
  const T* x;            // (M, K)
  const T* w;            // (N, K), (2N, K) with swiglu, (2N, K) QKV rows with rope
  const T* bias;         // (N) or null ((2N) with rope)
  const T* norm_weight;  // (K) or null; with the prologue x is normalized first
  const T* residual;     // (M, N) or null: y = residual + product; may be y itself
  T* y;                  // (M, N); null with rope
  float eps;
  int M, N, K, splits;  // N: output rows (pairs with swiglu and rope)
  int norm_threads;     // rms_norm_forward_threads(K / kVec<T>): the block the norm would run
  RopeTargets<T> rope;
};

// Stores v to element i of a float or bf16 cache row, as kv_write converts.
__device__ __forceinline__ void store_cache(void* row, bool bf16, int64_t i, float v) {
  if (bf16)
    static_cast<__nv_bfloat16*>(row)[i] = __float2bfloat16_rn(v);
  else
    static_cast<float*>(row)[i] = v;
}

// The rope_kv_write epilogue of pair `pair` (head h = pair / (D/2), i = pair % (D/2)) for
// row m: a, b are the product's elements h·D + i and h·D + i + D/2 rounded to T. Written as
// rope_kv_write_kernel writes them (the same rope_rotate, the same roundings).
template <class T>
__device__ void rope_epilogue(const RopeTargets<T>& r, int m, int64_t pair, T a, T b) {
  const int half = r.D / 2;
  const int h = static_cast<int>(pair / half), i = static_cast<int>(pair % half);
  const int64_t slot = r.slots[m];
  if (h < r.H + r.Hkv) {
    const float angle = static_cast<float>(r.positions[m]) * r.inv_freq[i];
    float y1, y2;
    rope_rotate(to_float(a), to_float(b), angle, false, y1, y2);
    const T r1 = from_float<T>(y1), r2 = from_float<T>(y2);
    const bool is_q = h < r.H;
    const int head = is_q ? h : h - r.H;
    T* out = is_q ? r.q_out + (static_cast<int64_t>(m) * r.H + head) * r.D
                  : r.k_out + (static_cast<int64_t>(m) * r.Hkv + head) * r.D;
    out[i] = r1;
    out[i + half] = r2;
    if (!is_q && slot >= 0) {
      const int64_t at = (slot * r.Hkv + head) * r.D;
      void* row = r.cache_bf16 ? static_cast<void*>(static_cast<__nv_bfloat16*>(r.k_cache) + at)
                               : static_cast<void*>(static_cast<float*>(r.k_cache) + at);
      store_cache(row, r.cache_bf16, i, to_float(r1));
      store_cache(row, r.cache_bf16, i + half, to_float(r2));
    }
  } else if (slot >= 0) {
    const int64_t at = (slot * r.Hkv + (h - r.H - r.Hkv)) * r.D;
    void* row = r.cache_bf16 ? static_cast<void*>(static_cast<__nv_bfloat16*>(r.v_cache) + at)
                             : static_cast<void*>(static_cast<float*>(r.v_cache) + at);
    store_cache(row, r.cache_bf16, i, to_float(a));
    store_cache(row, r.cache_bf16, i + half, to_float(b));
  }
}

// The prologue: the M rows of x normalized as rms_norm_forward_kernel normalizes them, into
// `normed` (M, K / kVec<T>) 16-byte groups of shared memory. This block's threads play the
// norm's p.norm_threads threads (thread t plays t, t + kThreads, ...): each adds the squares
// of its one group, the warps of played threads are summed by warp_sum and the warp sums by
// one more warp_sum over lanes, as block_sum does; so the rows get the norm's bits.
template <class T>
__device__ void normalize_rows(const GemvParams<T>& p, uint4* normed, float* scratch) {
  constexpr int W = kVec<T>;
  const int groups = p.K / W, lane = threadIdx.x % kWarp;
  const auto* weight = reinterpret_cast<const Vec16<T>*>(p.norm_weight);  // (groups)
  for (int m = 0; m < p.M; ++m) {
    const auto* row = reinterpret_cast<const Vec16<T>*>(p.x + static_cast<int64_t>(m) * p.K);
    for (int t0 = 0; t0 < p.norm_threads; t0 += kThreads) {  // uniform over the block
      const int t = t0 + static_cast<int>(threadIdx.x);
      float sum_sq = 0.0f;
      if (t < groups) {
        const Vec16<T> v = row[t];
#pragma unroll
        for (int j = 0; j < W; ++j) {
          const float f = to_float(v.v[j]);
          sum_sq += f * f;
        }
      }
      sum_sq = warp_sum(sum_sq);
      if (lane == 0 && t < p.norm_threads) scratch[t / kWarp] = sum_sq;
    }
    __syncthreads();
    const int warps = p.norm_threads / kWarp;
    const float total = warp_sum(lane < warps ? scratch[lane] : 0.0f);
    const float inv = 1.0f / sqrtf(total / static_cast<float>(p.K) + p.eps);
    for (int g = threadIdx.x; g < groups; g += kThreads) {
      const Vec16<T> v = row[g], w = weight[g];
      Vec16<T> out;
#pragma unroll
      for (int j = 0; j < W; ++j)
        out.v[j] = from_float<T>(to_float(w.v[j]) * (to_float(v.v[j]) * inv));
      normed[static_cast<int64_t>(m) * groups + g] = *reinterpret_cast<const uint4*>(&out);
    }
    __syncthreads();  // the rows are complete; scratch may be rewritten
  }
}

// The epilogue of output row `out_row` of x's row m from its F32 sums (one per part).
template <class T, int kEpi>
__device__ __forceinline__ void finish_row(const GemvParams<T>& p, int64_t out_row, int m,
                                           const float (&sum)[kEpi == kPlain ? 1 : 2]) {
  const int64_t at = static_cast<int64_t>(m) * p.N + out_row;
  if constexpr (kEpi == kSwiglu) {
    // Rounded as swiglu_out(linear(gate), linear(up)): g and u to T, then silu(g)·u.
    const float g = to_float(from_float<T>(sum[0])), u = to_float(from_float<T>(sum[1]));
    p.y[at] = from_float<T>(g * sigmoid(g) * u);
  } else if constexpr (kEpi == kRope) {
    // The product's two elements rounded as gemv_out stores them (+ bias), then the rope.
    const int half = p.rope.D / 2;
    const int64_t c0 = (out_row / half) * p.rope.D + out_row % half, c1 = c0 + half;
    const T a = from_float<T>(p.bias ? sum[0] + to_float(p.bias[c0]) : sum[0]);
    const T b = from_float<T>(p.bias ? sum[1] + to_float(p.bias[c1]) : sum[1]);
    rope_epilogue(p.rope, m, out_row, a, b);
  } else {
    const T product = from_float<T>(p.bias ? sum[0] + to_float(p.bias[out_row]) : sum[0]);
    // With a residual, rounded as add_out(residual, product): one rounding of the F32 sum.
    p.y[at] = p.residual ? from_float<T>(to_float(p.residual[at]) + to_float(product)) : product;
  }
}

// M ≤ kRows rows; kEpi: the epilogue; kNorm: the norm prologue, with M · K / kVec<T>
// 16-byte groups of dynamic shared memory. The grid is at most what fits on the GPU at once;
// block b serves the groups of output rows b, b + gridDim.x, ... (so the prologue runs once
// per block, and a row's sums do not depend on the grid).
template <class T, int kRows, int kEpi, bool kNorm>
__global__ void __launch_bounds__(kThreads) gemv_kernel(GemvParams<T> p) {
  constexpr int kParts = kEpi == kPlain ? 1 : 2;    // weight rows per output row
  __shared__ float partial[kParts][kWarps][kRows];  // each warp's sums over its K slice
  __shared__ float scratch[kWarp];                  // the prologue's warp sums
  extern __shared__ uint4 normed[];                 // (M, K/V) with kNorm
  const int M = p.M, N = p.N, K = p.K, splits = p.splits;
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int rows_per_block = kWarps / splits;
  const int64_t row_groups = (N + rows_per_block - 1) / rows_per_block;
  const int slice = warp % splits;
  const int groups = K / kVec<T>;  // 16-byte groups per row
  const int per_slice = (groups + splits - 1) / splits;
  const int begin = slice * per_slice, end = min(groups, begin + per_slice);
  uint4 wv[kParts][kLoads];         // one pass of loads, all issued before the first is used
  const uint4* w_rows[kParts];      // (K/V) each: the weight rows of this warp's output row
  auto point_at = [&](int64_t n) {  // n < N
    int64_t w_row[kParts];
    if constexpr (kEpi == kRope) {
      const int half = p.rope.D / 2;
      w_row[0] = (n / half) * p.rope.D + n % half;
      w_row[1] = w_row[0] + half;
    } else {
      w_row[0] = n;
      if constexpr (kEpi == kSwiglu) w_row[1] = N + n;
    }
#pragma unroll
    for (int q = 0; q < kParts; ++q) w_rows[q] = reinterpret_cast<const uint4*>(p.w + w_row[q] * K);
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
  enter_dependent_grid();
  if constexpr (kNorm) normalize_rows(p, normed, scratch);
  // x's groups: the normalized rows in shared memory, or x itself.
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
        finish_row<T, kEpi>(p, n, lane, sum);
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
    const int t = threadIdx.x;
    const int r = t / kRows, m = t % kRows;
    const int64_t out_row = first_row + r;
    if (t < rows_per_block * kRows && m < M && out_row < N) {
      float sum[kParts];
#pragma unroll
      for (int q = 0; q < kParts; ++q) {
        sum[q] = partial[q][r * splits][m];
        for (int s = 1; s < splits; ++s) sum[q] += partial[q][r * splits + s][m];
      }
      finish_row<T, kEpi>(p, out_row, m, sum);
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

// Blocks of `kernel` (kThreads threads, `shared` dynamic bytes) the current GPU holds at
// once, remembered per (device, kernel, shared bytes).
int64_t resident_blocks(const void* kernel, size_t shared) {
  static std::mutex mutex;
  static std::map<std::tuple<int, const void*, size_t>, int64_t> known;
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  const std::lock_guard<std::mutex> lock(mutex);
  auto it = known.find({device, kernel, shared});
  if (it != known.end()) return it->second;
  int sms = 0, per_sm = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, shared));
  const int64_t blocks = std::max<int64_t>(1, static_cast<int64_t>(sms) * per_sm);
  known[{device, kernel, shared}] = blocks;
  return blocks;
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
    p.splits = splits_for(epi == kRope ? 2 * N : N, groups);
    p.norm_threads = norm ? static_cast<int>(rms_norm_forward_threads(groups)) : 0;
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
    const int64_t blocks = ceil_div(N, kWarps / p.splits);
    const size_t shared = norm ? static_cast<size_t>(M * groups) * sizeof(uint4) : 0;
    dispatch_rows(M, [&](auto rows) {
      constexpr int kRows = decltype(rows)::value;
      auto pick = [&](auto epilogue) {
        constexpr int kE = decltype(epilogue)::value;
        return norm ? gemv_kernel<T, kRows, kE, true> : gemv_kernel<T, kRows, kE, false>;
      };
      const auto kernel = epi == kSwiglu ? pick(std::integral_constant<int, kSwiglu>{})
                          : epi == kRope ? pick(std::integral_constant<int, kRope>{})
                                         : pick(std::integral_constant<int, kPlain>{});
      launch_dependent(
          "gemv_kernel", kernel,
          dim3(static_cast<unsigned>(std::min<int64_t>(
              blocks, resident_blocks(reinterpret_cast<const void*>(kernel), shared)))),
          dim3(kThreads), shared, stream, p);
    });
  });
}

}  // namespace microllm::ops
