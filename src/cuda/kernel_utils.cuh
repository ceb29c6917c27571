// Device helpers shared by the CUDA kernels: element conversion, strided indexing, warp and
// block reductions, the last of several blocks, launch sizes, cp.async copies (async_copy.cuh).
// Device code only; includes nothing outside src/cuda/.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "async_copy.cuh"

namespace microllm::cuda {

constexpr int kMaxRank = 8;
constexpr int kWarp = 32;

// Maps a row-major linear index over `sizes` to an element offset with `strides`.
struct StridedIndexer {
  int rank = 0;
  int64_t sizes[kMaxRank] = {};
  int64_t strides[kMaxRank] = {};

  // Unrolled over kMaxRank so the arrays are indexed by constants (a loop to `rank` would
  // index a kernel parameter at run time, which goes through a local-memory copy).
  __host__ __device__ int64_t offset(int64_t linear) const {
    int64_t off = 0;
#pragma unroll
    for (int d = kMaxRank - 1; d >= 0; --d) {
      if (d >= rank) continue;
      const int64_t i = linear % sizes[d];
      linear /= sizes[d];
      off += i * strides[d];
    }
    return off;
  }
};

// ---- conversions: every kernel computes in float ---------------------------------------
template <class T>
__device__ __forceinline__ float to_float(T v) {
  return static_cast<float>(v);
}
template <>
__device__ __forceinline__ float to_float<__nv_bfloat16>(__nv_bfloat16 v) {
  return __bfloat162float(v);
}
template <>
__device__ __forceinline__ float to_float<__half>(__half v) {
  return __half2float(v);
}

template <class T>
__device__ __forceinline__ T from_float(float v) {
  return static_cast<T>(v);
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}
template <>
__device__ __forceinline__ __half from_float<__half>(float v) {
  return __float2half_rn(v);
}

// ---- 16-byte vectors: bandwidth-bound kernels move 16 bytes per thread access ---------
template <class T>
constexpr int kVec = 16 / sizeof(T);  // elements of T in one 16-byte vector

template <class T>
struct alignas(16) Vec16 {
  T v[kVec<T>];
};

// ---- reductions --------------------------------------------------------------------------
__device__ __forceinline__ float warp_sum(float v) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2)
    v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2)
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

// Sum over the block (blockDim.x a multiple of 32, ≤ 1024); every thread gets the result.
// `scratch` holds 32 floats of shared memory; the order of additions is fixed.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  v = warp_sum(v);
  __syncthreads();  // scratch may still be read by a previous call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  const int warps = blockDim.x / kWarp;
  v = lane < warps ? scratch[lane] : 0.0f;
  return warp_sum(v);
}
__device__ __forceinline__ float block_max(float v, float* scratch) {
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  const int warps = blockDim.x / kWarp;
  v = lane < warps ? scratch[lane] : -INFINITY;
  return warp_max(v);
}

// ---- blocks that share one result ----------------------------------------------------------
// Whether this block is the last of `arrivals` blocks to count on `counter` (zero before the
// first arrives); that one combines what the others wrote, which the fences make visible to
// it (read it past this SM's L1, with __ldcg). The last resets the counter for the next
// launch. Called by the whole block, after its writes; the only atomic is the increment, so
// a result combined in a fixed order keeps its bits whichever block comes last.
__device__ __forceinline__ bool last_to_arrive(unsigned* counter, unsigned arrivals) {
  __shared__ bool last;
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    last = atomicAdd(counter, 1u) == arrivals - 1;
    if (last) *counter = 0;  // every block of this launch has counted: ready for the next
  }
  __syncthreads();
  if (last) __threadfence();
  return last;
}

// ---- launch sizes ------------------------------------------------------------------------
inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
// Blocks for a grid-stride loop over n elements: enough to fill the GPU, never more than needed.
inline unsigned grid_for(int64_t n, int threads) {
  const int64_t blocks = ceil_div(n, threads);
  const int64_t cap =
      132 * 32;  // 32 blocks per SM on a 132-SM H100/H200; grid-stride covers the rest
  return static_cast<unsigned>(blocks < 1 ? 1 : (blocks > cap ? cap : blocks));
}

}  // namespace microllm::cuda
