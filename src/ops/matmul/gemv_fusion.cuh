// The decode GEMV's parts shared by its two kernels (gemv_cuda.cu: CUDA cores, one warp per
// output row; gemv_tensor_core_cuda.cu: mma.sync, one warp per 8 output rows): the
// parameters, the RMSNorm prologue, the epilogues (bias, residual, SwiGLU, rope_kv_write)
// and the launch helpers. An epilogue sees one output element's F32 sums and rounds them as
// the unfused operators would, so either kernel gives the fused operators' bits for its own
// products.
#pragma once

#include <algorithm>
#include <map>
#include <mutex>
#include <tuple>
#include <utility>

#include "../cuda_common.cuh"
#include "../rope/rope_rotate.cuh"
#include "microllm/ops/matmul.h"

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
  int M, N, K, splits;  // N: output rows (pairs with swiglu and rope); splits: K slices a block
  int cluster_blocks;   // tensor-core kernel: blocks (one cluster) a tile's K slices spread over
  int norm_threads;     // rms_norm_forward_threads(K / kVec<T>): the block the norm would run
  bool stage_x;         // tensor-core kernel without the norm: x staged (stage_rows)
  bool early_inputs;    // CUDA-core kernel: the first row group's epilogue inputs (and at
                        // one row the norm weight) loaded before the wait (GemvFusion)
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
// rope_kv_write_kernel writes them (the same rope_rotate, the same roundings);
// position, slot and inv_freq: row m's position and cache slot and the pair's frequency
// (EpilogueInputs).
template <class T>
__device__ void rope_epilogue(const RopeTargets<T>& r, int m, int64_t pair, T a, T b,
                              int32_t position, int64_t slot, float inv_freq) {
  const int half = r.D / 2;
  const int h = static_cast<int>(pair / half), i = static_cast<int>(pair % half);
  if (h < r.H + r.Hkv) {
    const float angle = static_cast<float>(position) * inv_freq;
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

// Shared floats the norm prologue needs: each row's warp sums (kGemvMaxRows, kWarp), then each
// row's inverse RMS (kGemvMaxRows).
inline constexpr int kNormScratch = (kWarp + 1) * static_cast<int>(kGemvMaxRows);
static_assert(kGemvMaxRows <= kGemvWarps, "the prologue gives each row of x one warp");

// The prologue: the M ≤ kRows rows of x normalized as rms_norm_forward_kernel normalizes them,
// into `normed` (M, K / kVec<T>) 16-byte groups of shared memory; `scratch` holds kNormScratch
// floats. This block's threads play the norm's p.norm_threads threads of every row at once
// (a warp plays one warp of the norm's block for one row): each played thread adds the
// squares of its one group, warp_sum adds a played warp's, and warp m adds row m's warp sums
// with one more warp_sum over lanes, as block_sum does (with one row, every warp does, as
// block_sum gives every thread the sum); so the rows get the norm's bits. Every step issues
// kBatch loads a thread before it uses the first (kBatch: registers against latencies), so
// the rows take one memory latency each step, not one per row. With `preloaded`, first_weights
// holds the norm weight's groups of the second step's first pass (load_norm_weights, called
// before the wait).
template <int kBatch, class T>
__device__ __forceinline__ void load_norm_weights(const GemvParams<T>& p, int e0,
                                                  Vec16<T> (&w)[kBatch]) {
  const int groups = p.K / kVec<T>, elements = p.M * groups;
  const auto* weight = reinterpret_cast<const Vec16<T>*>(p.norm_weight);  // (groups)
#pragma unroll
  for (int b = 0; b < kBatch; ++b) {
    const int e = e0 + b * kGemvThreads + static_cast<int>(threadIdx.x);
    w[b] = e < elements ? weight[e < groups ? e : e % groups] : Vec16<T>{};
  }
}

template <int kBatch, int kRows, class T>
__device__ void normalize_rows(const GemvParams<T>& p, uint4* normed, float* scratch,
                               const Vec16<T> (&first_weights)[kBatch], bool preloaded) {
  constexpr int W = kVec<T>;
  constexpr bool kOneRow = kRows == 1;
  const int groups = p.K / W, lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int played_warps = p.norm_threads / kWarp;
  const auto* x = reinterpret_cast<const Vec16<T>*>(p.x);  // (M, groups)
  float* warp_sums = scratch;                              // (M, played_warps)
  float* inv_rms = scratch + kGemvMaxRows * kWarp;         // (M)
  // Played thread t of row m is item m · norm_threads + t (norm_threads is a multiple of 32).
  const int items = p.M * p.norm_threads;
  for (int i0 = 0; i0 < items; i0 += kBatch * kGemvThreads) {  // uniform over the block
    Vec16<T> v[kBatch] = {};
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int i = i0 + b * kGemvThreads + static_cast<int>(threadIdx.x);
      const int m = kOneRow ? 0 : i / p.norm_threads, t = kOneRow ? i : i % p.norm_threads;
      if (i < items && t < groups) v[b] = x[static_cast<int64_t>(m) * groups + t];
    }
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int i = i0 + b * kGemvThreads + static_cast<int>(threadIdx.x);
      const int m = kOneRow ? 0 : i / p.norm_threads, t = kOneRow ? i : i % p.norm_threads;
      float sum_sq = 0.0f;
      if (i < items && t < groups) {
#pragma unroll
        for (int j = 0; j < W; ++j) {
          const float f = to_float(v[b].v[j]);
          sum_sq += f * f;
        }
      }
      sum_sq = warp_sum(sum_sq);
      if (lane == 0 && i < items) warp_sums[m * played_warps + t / kWarp] = sum_sq;
    }
  }
  __syncthreads();
  auto row_inv_rms = [&](int m) {
    const float total = warp_sum(lane < played_warps ? warp_sums[m * played_warps + lane] : 0.0f);
    return 1.0f / sqrtf(total / static_cast<float>(p.K) + p.eps);
  };
  float one_row_inv = 0.0f;
  if constexpr (kOneRow) {
    one_row_inv = row_inv_rms(0);
  } else {
    if (warp < p.M) {
      const float inv = row_inv_rms(warp);
      if (lane == 0) inv_rms[warp] = inv;
    }
    __syncthreads();
  }
  const int elements = p.M * groups;  // (m, g) pairs
  for (int e0 = 0; e0 < elements; e0 += kBatch * kGemvThreads) {
    Vec16<T> v[kBatch] = {}, w[kBatch] = {};
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int e = e0 + b * kGemvThreads + static_cast<int>(threadIdx.x);
      if (e < elements) v[b] = x[e];
    }
    if (e0 == 0 && preloaded) {
#pragma unroll
      for (int b = 0; b < kBatch; ++b) w[b] = first_weights[b];
    } else {
      load_norm_weights(p, e0, w);
    }
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int e = e0 + b * kGemvThreads + static_cast<int>(threadIdx.x);
      if (e >= elements) continue;
      const float inv = kOneRow ? one_row_inv : inv_rms[e / groups];
      Vec16<T> out;
#pragma unroll
      for (int j = 0; j < W; ++j)
        out.v[j] = from_float<T>(to_float(w[b].v[j]) * (to_float(v[b].v[j]) * inv));
      normed[e] = *reinterpret_cast<const uint4*>(&out);
    }
  }
  __syncthreads();  // the rows are complete
}

// The prologue without a norm: the 16-byte groups [first, end) of the M rows of x copied into
// `staged` (M, K / kVec<T>) groups of shared memory, at their places in the rows, by cp.async
// (all issued before the first arrives), so that the product's reads of x, one per 16-byte
// group of W, wait for shared memory instead of the L2. A block whose warps take only part of
// K (a split over a cluster) stages only that part.
template <class T>
__device__ void stage_rows(const GemvParams<T>& p, uint4* staged, int first, int end) {
  const int groups = p.K / kVec<T>, width = end - first;
  const auto* x = reinterpret_cast<const uint4*>(p.x);  // (M, groups)
  if (width == groups) {                                // whole rows: one flat run
    for (int e = threadIdx.x; e < p.M * groups; e += kGemvThreads)
      copy16_async(staged + e, x + e, true);
  } else {
    for (int e = threadIdx.x; e < p.M * width; e += kGemvThreads) {
      const int at = (e / width) * groups + first + e % width;
      copy16_async(staged + at, x + at, true);
    }
  }
  commit_async();
  wait_async<0>();
  __syncthreads();
}

// What the epilogue of one output row of one row of x reads besides the row's sums: the bias
// of its weight rows, the residual, and with rope the row's position and cache slot and the
// pair's frequency. The CUDA-core kernel loads a row group's inputs before its wait when it
// may (GemvParams::early_inputs), so that their latency overlaps the previous kernel instead
// of following the product. Step inputs and the residual are read through the L2 (ld.cg),
// where a completed kernel's stores are.
template <int kEpi>
struct EpilogueInputs {
  float bias[kEpi == kPlain ? 1 : 2] = {};  // read only when the call has a bias
  float residual = 0.0f;                    // kPlain with a residual
  int32_t position = 0, slot = 0;           // kRope
  float inv_freq = 0.0f;                    // kRope
};

template <class T, int kEpi>
__device__ __forceinline__ EpilogueInputs<kEpi> load_epilogue_inputs(const GemvParams<T>& p,
                                                                     int64_t out_row, int m) {
  EpilogueInputs<kEpi> in;
  if constexpr (kEpi == kRope) {
    const int half = p.rope.D / 2;
    const int64_t c0 = (out_row / half) * p.rope.D + out_row % half;
    if (p.bias) {
      in.bias[0] = to_float(p.bias[c0]);
      in.bias[1] = to_float(p.bias[c0 + half]);
    }
    in.position = __ldcg(p.rope.positions + m);
    in.slot = __ldcg(p.rope.slots + m);
    in.inv_freq = p.rope.inv_freq[out_row % half];
  } else if constexpr (kEpi == kPlain) {
    if (p.bias) in.bias[0] = to_float(p.bias[out_row]);
    if (p.residual)
      in.residual = to_float(__ldcg(p.residual + static_cast<int64_t>(m) * p.N + out_row));
  }
  return in;
}

// The epilogue of output row `out_row` of x's row m from its F32 sums (one per part) and its
// inputs.
template <class T, int kEpi>
__device__ __forceinline__ void finish_row(const GemvParams<T>& p, int64_t out_row, int m,
                                           const float (&sum)[kEpi == kPlain ? 1 : 2],
                                           const EpilogueInputs<kEpi>& in) {
  const int64_t at = static_cast<int64_t>(m) * p.N + out_row;
  if constexpr (kEpi == kSwiglu) {
    // Rounded as swiglu_out(linear(gate), linear(up)): g and u to T, then silu(g)·u.
    const float g = to_float(from_float<T>(sum[0])), u = to_float(from_float<T>(sum[1]));
    p.y[at] = from_float<T>(g * sigmoid(g) * u);
  } else if constexpr (kEpi == kRope) {
    // The product's two elements rounded as gemv_out stores them (+ bias), then the rope.
    const T a = from_float<T>(p.bias ? sum[0] + in.bias[0] : sum[0]);
    const T b = from_float<T>(p.bias ? sum[1] + in.bias[1] : sum[1]);
    rope_epilogue(p.rope, m, out_row, a, b, in.position, in.slot, in.inv_freq);
  } else {
    const T product = from_float<T>(p.bias ? sum[0] + in.bias[0] : sum[0]);
    // With a residual, rounded as add_out(residual, product): one rounding of the F32 sum.
    p.y[at] = p.residual ? from_float<T>(in.residual + to_float(product)) : product;
  }
}

// finish_row with the inputs loaded now.
template <class T, int kEpi>
__device__ __forceinline__ void finish_row(const GemvParams<T>& p, int64_t out_row, int m,
                                           const float (&sum)[kEpi == kPlain ? 1 : 2]) {
  finish_row<T, kEpi>(p, out_row, m, sum, load_epilogue_inputs<T, kEpi>(p, out_row, m));
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

// Clusters of `cluster` blocks of `kernel` (kGemvThreads threads, `shared` dynamic bytes) the
// current GPU holds at once (a cluster's blocks share a GPC), remembered like resident_blocks.
inline int64_t resident_clusters(const void* kernel, size_t shared, int cluster) {
  static std::mutex mutex;
  static std::map<std::tuple<int, const void*, size_t, int>, int64_t> known;
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  const std::lock_guard<std::mutex> lock(mutex);
  auto it = known.find({device, kernel, shared, cluster});
  if (it != known.end()) return it->second;
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeClusterDimension;
  attribute.val.clusterDim.x = static_cast<unsigned>(cluster);
  attribute.val.clusterDim.y = 1;
  attribute.val.clusterDim.z = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(static_cast<unsigned>(cluster));
  config.blockDim = dim3(kGemvThreads);
  config.dynamicSmemBytes = shared;
  config.attrs = &attribute;
  config.numAttrs = 1;
  int clusters = 0;
  CUDA_CHECK(cudaOccupancyMaxActiveClusters(&clusters, kernel, &config));
  const int64_t result = std::max<int64_t>(1, clusters);
  known[{device, kernel, shared, cluster}] = result;
  return result;
}

// Whether a block of `kernel` may have `shared` bytes of dynamic shared memory beside its
// static ones (the device's opt-in limit); raises the kernel's limit when it may.
inline bool block_fits(const void* kernel, size_t shared) {
  int device = 0, optin = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  cudaFuncAttributes attributes{};
  CUDA_CHECK(cudaFuncGetAttributes(&attributes, kernel));
  if (shared + attributes.sharedSizeBytes > static_cast<size_t>(optin)) return false;
  allow_dynamic_shared(kernel, shared);
  return true;
}

// Whether a launch of `kernel` without the norm prologue stages x (`stage_bytes`) in shared
// memory on top of its other `shared` bytes: when the block can have that much and as many
// blocks stay resident as the grid (`blocks`, before the cap at what fits) can use. The
// decision depends on the shapes and the GPU alone; it changes where x is read from, not the
// order of any sum.
inline bool stage_x_fits(const void* kernel, size_t shared, size_t stage_bytes, int64_t blocks) {
  static std::mutex mutex;
  static std::map<std::tuple<int, const void*, size_t, size_t, int64_t>, bool> known;
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  {
    const std::lock_guard<std::mutex> lock(mutex);
    auto it = known.find({device, kernel, shared, stage_bytes, blocks});
    if (it != known.end()) return it->second;
  }
  int optin = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  cudaFuncAttributes attributes{};
  CUDA_CHECK(cudaFuncGetAttributes(&attributes, kernel));
  const size_t staged = shared + stage_bytes;
  bool fits = staged + attributes.sharedSizeBytes <= static_cast<size_t>(optin);
  if (fits) {
    allow_dynamic_shared(kernel, staged);
    fits = resident_blocks(kernel, staged) >= std::min(blocks, resident_blocks(kernel, shared));
  }
  const std::lock_guard<std::mutex> lock(mutex);
  known[{device, kernel, shared, stage_bytes, blocks}] = fits;
  return fits;
}

// The tensor-core kernel for BF16/F16 (gemv_tensor_core_cuda.cu): p.splits and
// p.cluster_blocks from tensor_core_split; epi one of kPlain, kSwiglu, kRope; with `norm` the
// prologue.
struct TensorCoreSplit {
  int warps;   // K slices of a tile within a block
  int blocks;  // blocks of a cluster that share a tile: warps · blocks slices in all
};
TensorCoreSplit tensor_core_split(int64_t rows, int64_t groups);
template <class T>
void launch_gemv_tensor_core(const GemvParams<T>& p, int epi, bool norm, cudaStream_t stream);

}  // namespace microllm::ops::gemv_detail
