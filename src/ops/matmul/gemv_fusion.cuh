// The decode GEMV's parts shared by its two kernels (gemv_cuda.cu: CUDA cores, one warp per
// output row; gemv_tensor_core_cuda.cu: mma.sync, one warp per 8 output rows): the
// parameters, the RMSNorm prologue, the epilogues (bias, residual, SwiGLU, rope_kv_write)
// and the launch helpers. An epilogue sees one output element's F32 sums and rounds them as
// the unfused operators would, so either kernel gives the fused operators' bits for its own
// products.
#pragma once

#include <map>
#include <mutex>
#include <tuple>

#include "../cuda_common.cuh"
#include "../rope/rope_rotate.cuh"

namespace microllm::ops::gemv_detail {

using namespace cuda_detail;

inline constexpr int kGemvWarps = 8;  // warps per block of either kernel
inline constexpr int kGemvThreads = kGemvWarps * kWarp;

__device__ __forceinline__ float sigmoid(float v) { return 1.0f / (1.0f + expf(-v)); }

// The epilogues: kPlain (+ bias, + residual), kSwiglu (the gate/up pair of rows n, N + n),
// kRope (the pair of QKV rows h·D + i, h·D + i + D/2 of head h, rotated or not).
inline constexpr int kPlain = 0, kSwiglu = 1, kRope = 2;

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

// The weight row of part q (0, or 1 for the second row of a swiglu or rope pair) of output
// row n.
template <class T, int kEpi>
__device__ __forceinline__ int64_t weight_row(const GemvParams<T>& p, int64_t n, int q) {
  if constexpr (kEpi == kRope) {
    const int half = p.rope.D / 2;
    return (n / half) * p.rope.D + n % half + (q == 1 ? half : 0);
  } else {
    return q == 1 ? p.N + n : n;
  }
}

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
// norm's p.norm_threads threads (thread t plays t, t + kGemvThreads, ...): each adds the squares
// of its one group, the warps of played threads are summed by warp_sum and the warp sums by
// one more warp_sum over lanes, as block_sum does; so the rows get the norm's bits.
template <class T>
__device__ void normalize_rows(const GemvParams<T>& p, uint4* normed, float* scratch) {
  constexpr int W = kVec<T>;
  const int groups = p.K / W, lane = threadIdx.x % kWarp;
  const auto* weight = reinterpret_cast<const Vec16<T>*>(p.norm_weight);  // (groups)
  for (int m = 0; m < p.M; ++m) {
    const auto* row = reinterpret_cast<const Vec16<T>*>(p.x + static_cast<int64_t>(m) * p.K);
    for (int t0 = 0; t0 < p.norm_threads; t0 += kGemvThreads) {  // uniform over the block
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
    for (int g = threadIdx.x; g < groups; g += kGemvThreads) {
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

// Blocks of `kernel` (kGemvThreads threads, `shared` dynamic bytes) the current GPU holds at
// once, remembered per (device, kernel, shared bytes).
inline int64_t resident_blocks(const void* kernel, size_t shared) {
  static std::mutex mutex;
  static std::map<std::tuple<int, const void*, size_t>, int64_t> known;
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  const std::lock_guard<std::mutex> lock(mutex);
  auto it = known.find({device, kernel, shared});
  if (it != known.end()) return it->second;
  int sms = 0, per_sm = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kGemvThreads, shared));
  const int64_t blocks = std::max<int64_t>(1, static_cast<int64_t>(sms) * per_sm);
  known[{device, kernel, shared}] = blocks;
  return blocks;
}

// The tensor-core kernel for BF16/F16 (gemv_tensor_core_cuda.cu): p.splits from
// tensor_core_splits; epi one of kPlain, kSwiglu, kRope; with `norm` the prologue.
int tensor_core_splits(int64_t rows, int64_t groups);
template <class T>
void launch_gemv_tensor_core(const GemvParams<T>& p, int epi, bool norm, cudaStream_t stream);

}  // namespace microllm::ops::gemv_detail
