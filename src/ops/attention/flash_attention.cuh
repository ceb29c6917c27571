// What the flash attention kernels share: the shape they read, the mask, and which tiles of
// one side a tile of the other side has to visit.
//
// Scores live in the log2 domain: s₂ = q·k · scale · log₂e, so that exp2 replaces exp, and
// the saved statistic per query row is lse₂ = m₂ + log₂ Σ exp2(s₂ − m₂). A row without any
// visible key saves +∞, which makes every recomputed probability exp2(s₂ − lse₂) zero.
#pragma once

#include <cmath>
#include <cstdint>

#include "attention_kernels.h"
#include "flash_mma.cuh"

namespace microllm::ops::flash {

struct FlashShape {
  int64_t B, H, Hkv, T, S;
  bool causal;
  float scale;       // multiplies q·k
  float scale_log2;  // scale · log₂e
  // Positions of the T queries and S keys (I64), or null for the defaults: key j at j and
  // query t at t + S − T. Only with the defaults can whole tiles be skipped by index.
  const int64_t* q_pos;
  const int64_t* k_pos;
};

// The mask position of query t (t < T).
__device__ __forceinline__ int64_t query_position(const FlashShape& s, int64_t t) {
  return s.q_pos != nullptr ? s.q_pos[t] : t + s.S - s.T;
}
// The mask position of key j (j < S).
__device__ __forceinline__ int64_t key_position(const FlashShape& s, int64_t j) {
  return s.k_pos != nullptr ? s.k_pos[j] : j;
}
__device__ __forceinline__ bool visible(const FlashShape& s, int64_t query_pos, int64_t key_pos) {
  return !s.causal || key_pos <= query_pos;
}

__host__ __device__ inline int64_t tiles_of(int64_t n) { return (n + kTileRows - 1) / kTileRows; }

// Whether some pair of the queries from t0 on and the 64 keys of the tile at j0 is masked:
// keys past S, or (causal) a key after some query. Tiles that need no mask skip its
// per-element test. With explicit positions every causal tile is tested. (Query rows past
// T need no mask: their saved log-sum-exp of +∞ makes their probabilities 0.)
__host__ __device__ inline bool tile_needs_mask(const FlashShape& s, int64_t t0, int64_t j0) {
  if (j0 + kTileRows > s.S) return true;
  if (!s.causal) return false;
  if (s.q_pos != nullptr || s.k_pos != nullptr) return true;
  return j0 + kTileRows - 1 > t0 + s.S - s.T;  // the last key after the first query
}

// Key tiles of `key_rows` keys, [0, end), that the queries [t0, t0 + query_rows) (up to T)
// see under a causal mask over default positions (query t at t + S − T): through the last
// key the last of them sees. The mma.sync kernels ask for 64-row tiles of both, the wgmma ones
// for their own.
__host__ __device__ inline int64_t causal_key_tiles(int64_t T, int64_t S, int64_t t0,
                                                    int64_t query_rows, int64_t key_rows) {
  const int64_t last_query = (t0 + query_rows < T ? t0 + query_rows : T) - 1;
  const int64_t last_key = last_query + S - T;  // the last key that query sees
  if (last_key < 0) return 0;
  return ((last_key + 1 < S ? last_key + 1 : S) + key_rows - 1) / key_rows;
}

// Key tiles [0, end) that the query tile starting at t0 visits: all of them, unless the mask
// is causal over default positions, where keys after the tile's last query are skipped.
__host__ __device__ inline int64_t key_tiles_end(const FlashShape& s, int64_t t0) {
  if (!s.causal || s.q_pos != nullptr || s.k_pos != nullptr) return tiles_of(s.S);
  return causal_key_tiles(s.T, s.S, t0, kTileRows, kTileRows);
}

// Starts the asynchronous loads of key and value tile `tile` (rows tile·64.., zero rows past
// S) into stage `stage` of k_tiles and v_tiles (2 × (64, D + 8) each), and stores the tile's
// key positions into key_pos[stage]. k, v: (S, D). Shared by the forward and the dQ kernel
// that recomputes dS, which stream the same tiles.
template <class T, int D>
__device__ __forceinline__ void load_key_value_tile(T* k_tiles, T* v_tiles,
                                                    int64_t (&key_pos)[2][kTileRows], const T* k,
                                                    const T* v, const FlashShape& s, int64_t tile,
                                                    int stage) {
  const int64_t j0 = tile * kTileRows;
  load_tile_async<T, D>(k_tiles + stage * kTileElements<D>, k, j0, s.S);
  load_tile_async<T, D>(v_tiles + stage * kTileElements<D>, v, j0, s.S);
  if (threadIdx.x < kTileRows && j0 + threadIdx.x < s.S)
    key_pos[stage][threadIdx.x] = key_position(s, j0 + threadIdx.x);
}

// The first block of `rows` queries (blocks [begin, ⌈T / rows⌉)) that sees the key tile
// starting at j0: the same rule seen from the key side.
__host__ __device__ inline int64_t query_blocks_begin(const FlashShape& s, int64_t j0, int rows) {
  if (!s.causal || s.q_pos != nullptr || s.k_pos != nullptr) return 0;
  const int64_t first_query = j0 - (s.S - s.T);  // the first query that sees key j0
  if (first_query <= 0) return 0;
  return first_query / rows;  // may be past the last block: no query sees the tile
}

// q, out, dout, dq (B, H, T, D); k, v, dk, dv (B, Hkv, S, D); lse, delta (B, H, T) F32.
// The backward kernels' arguments (flash_attention_backward_cuda.cu).
template <class T>
struct BackwardArgs {
  FlashShape shape;
  const T* q;
  const T* k;
  const T* v;
  const T* dout;
  const float* lse;
  const float* delta;
  T* dq;
  T* dk;
  T* dv;
  int parts;        // blocks per (b, KV head, key tile): the group's heads split in parts
  float* dk_parts;  // (parts, B·Hkv, S, D) F32 unscaled sums when parts > 1, else null
  float* dv_parts;
  T* ds;             // (B·H, ds_rows, ds_pitch): dSᵀ, written by dK/dV, read by dQ
  int64_t ds_rows;   // S rounded up to whole 64-row tiles (128 for the wgmma kernels)
  int64_t ds_pitch;  // T rounded up to whole 64-row tiles (128 for the wgmma kernels)
};

// The wgmma backward kernels (flash_attention_wgmma_backward_cuda.cu; BF16, D 64, default
// positions, T ≤ S): the scratch's rows and columns rounded up to 128 (`wgmma_scratch_rows`
// of S and of T), the dK/dV kernel's parts of a group, and the two kernels.
int64_t wgmma_scratch_rows(int64_t n);
int wgmma_dkdv_parts(const FlashShape& s);
void launch_dkdv_wgmma(const BackwardArgs<__nv_bfloat16>& args, cudaStream_t stream);
void launch_dq_wgmma(const BackwardArgs<__nv_bfloat16>& args, cudaStream_t stream);

// The kernels' shape from the op's, with the positions (both defined, dense I64) or neither;
// checks what the kernels support (D 64 or 128, grid limits).
FlashShape flash_shape_of(const AttentionShape& s, const Tensor& q_pos, const Tensor& k_pos);

// Lets `kernel` use `bytes` of dynamic shared memory (above the 48 KiB default), once per
// kernel (the template parameter is the kernel itself, not its type, which kernels share).
template <auto kernel>
void allow_shared_bytes(size_t bytes) {
  static const cudaError_t result = cudaFuncSetAttribute(
      kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes));
  CUDA_CHECK(result);
}

}  // namespace microllm::ops::flash
