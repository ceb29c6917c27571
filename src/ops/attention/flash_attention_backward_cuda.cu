// Flash attention backward on tensor cores (mma.sync), deterministic: no atomics.
// Reference: Dao 2023 (FlashAttention-2), section 3.1.2, for the recomputation. dK/dV and dQ
// are owned by two kernels, which removes the atomic dQ accumulation; the first writes the
// dS tiles it computes (rounded to the input dtype, as the products round them anyway) to a
// scratch, so that the second is one matrix product over them instead of recomputing S and dP.
//   delta = rowsum(dO ∘ O)                                         (B, H, T)
//   P = exp2(S₂ − lse₂), dP = dO·Vᵀ, dS = P ∘ (dP − delta)
//   dK = scale · dSᵀ·Q, dV = Pᵀ·dO    (key-tile blocks, a part of the group's heads and the
//                                      query tiles in order; with the group split into
//                                      parts, F32 sums per part added in part order by
//                                      flash_sum_parts_kernel: the GQA sum has one fixed order)
//   dQ = scale · dS·K                  (query-tile blocks, key tiles in order, dS from the
//                                      scratch)
// The scratch holds dSᵀ, (S rounded up to 64, T rounded up to 64) per (b, h); only the tiles
// that some query sees are written and read. Its size is bounded by running the three kernels
// over chunks of (b, KV head) pairs. The streamed side of each kernel is double-buffered with
// cp.async. Both kernels start with their heaviest blocks (causal: the last query tiles for
// dQ, the first key tiles for dK/dV), so the long blocks are not left for the end of the grid.
#include <algorithm>
#include <type_traits>

#include "../cuda_common.cuh"
#include "attention_kernels.h"
#include "flash_attention.cuh"

namespace microllm::ops {
namespace {

using namespace cuda_detail;
using namespace flash;

// delta[row] = Σ_d dO[row, d]·O[row, d] in F32 from 16-byte groups: kDeltaLanes<T, D> lanes
// a row, each the 8 products of one 16-byte group of both, left to right, then a butterfly
// over the row's lanes.
template <class T, int D>
constexpr int kDeltaLanes = D / kVec<T>;  // 8 at D 64, 16 at D 128: rows share a warp

template <class T, int D>
__global__ void flash_delta_kernel(const T* out, const T* dout, float* delta, int64_t rows) {
  constexpr int kLanes = kDeltaLanes<T, D>;
  const int64_t thread = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t row = thread / kLanes;
  float sum = 0.0f;
  if (row < rows) {  // no early return: every lane of the warp takes part in the shuffles
    const Vec16<T> o = reinterpret_cast<const Vec16<T>*>(out)[thread];  // (rows, kLanes)
    const Vec16<T> d = reinterpret_cast<const Vec16<T>*>(dout)[thread];
#pragma unroll
    for (int j = 0; j < kVec<T>; ++j) sum = fmaf(to_float(d.v[j]), to_float(o.v[j]), sum);
  }
#pragma unroll
  for (int offset = kLanes / 2; offset > 0; offset /= 2)
    sum += __shfl_xor_sync(0xffffffffu, sum, offset);
  if (row < rows && thread % kLanes == 0) delta[row] = sum;
}

// acc[nt] += rows(tile_a) · rows(tile_b)ᵀ for the warp's 16 rows of tile_a against N rows of
// tile_b (N / 8 accumulator tiles), over the head dim.
template <int D, int N, class T>
__device__ __forceinline__ void rows_times_rows(float (&acc)[N / 8][4], const T* tile_a,
                                                const T* tile_b, int warp, int lane) {
#pragma unroll
  for (int ks = 0; ks < D / 16; ++ks) {
    uint32_t a[4];
    load_a(a, tile_a, kStride<D>, warp * 16, ks * 16, lane);
#pragma unroll
    for (int pair = 0; pair < N / 16; ++pair) {
      uint32_t b[2][2];
      load_b_pair(b, tile_b, kStride<D>, pair * 16, ks * 16, lane);
      mma_16816<T>(acc[2 * pair], a, b[0]);
      mma_16816<T>(acc[2 * pair + 1], a, b[1]);
    }
  }
}

// acc[nt] += W · tile for a warp's 16 × N weights W held as accumulator tiles (rounded to
// 16 bits here) and N shared rows of `tile`, over its D columns.
template <int D, int N, class T>
__device__ __forceinline__ void weights_times_rows(float (&acc)[D / 8][4],
                                                   const float (&w)[N / 8][4], const T* tile,
                                                   int lane) {
#pragma unroll
  for (int kk = 0; kk < N / 16; ++kk) {
    const uint32_t a[4] = {pack_pair<T>(w[2 * kk][0], w[2 * kk][1]),
                           pack_pair<T>(w[2 * kk][2], w[2 * kk][3]),
                           pack_pair<T>(w[2 * kk + 1][0], w[2 * kk + 1][1]),
                           pack_pair<T>(w[2 * kk + 1][2], w[2 * kk + 1][3])};
    fragment_times_rows<D>(acc, a, tile, kk * 16, lane);
  }
}

// Stores a warp's 16 × D accumulator rows (scaled) into rows [r0, r0 + 16) of a dense
// (rows, D) matrix of T (rounded) or float (as they are, scale 1), skipping rows at or past
// `rows`.
template <int D, class Out>
__device__ __forceinline__ void store_rows(Out* matrix, const float (&acc)[D / 8][4], float scale,
                                           int64_t r0, int64_t rows, int g, int c) {
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int64_t r = r0 + g + 8 * i;
    if (r >= rows) continue;
    Out* row = matrix + r * D + 2 * c;
#pragma unroll
    for (int nt = 0; nt < D / 8; ++nt) {
      const float lo = acc[nt][2 * i] * scale, hi = acc[nt][2 * i + 1] * scale;
      if constexpr (std::is_same_v<Out, float>)
        *reinterpret_cast<float2*>(row + nt * 8) = make_float2(lo, hi);
      else
        *reinterpret_cast<uint32_t*>(row + nt * 8) = pack_pair<Out>(lo, hi);
    }
  }
}

// dQ: a block per 64 query rows of one (b, h), streaming the visible key tiles' K rows and
// dSᵀ tiles (from the dK/dV kernel's scratch): dQ = scale · dS·K.
template <class T, int D>
constexpr size_t dq_shared_bytes() {
  return (2 * kTileElements<D> + 2 * kTileElements<kTileRows>)*sizeof(T);
}

template <class T, int D>
__global__ void __launch_bounds__(kThreads) flash_dq_kernel(BackwardArgs<T> a) {
  extern __shared__ __align__(16) unsigned char shared[];
  T* k_tiles = reinterpret_cast<T*>(shared);     // 2 × (64 keys, D + 8)
  T* ds_tiles = k_tiles + 2 * kTileElements<D>;  // 2 × (64 keys, 64 queries + 8): dSᵀ

  const FlashShape& s = a.shape;
  const int64_t bh = blockIdx.x;
  const int64_t kv = (bh / s.H) * s.Hkv + (bh % s.H) / (s.H / s.Hkv);
  const int64_t t0 = (static_cast<int64_t>(gridDim.y) - 1 - blockIdx.y) * kTileRows;
  const T* k = a.k + kv * s.S * D;                   // (S, D)
  const T* ds = a.ds + bh * a.ds_rows * a.ds_pitch;  // (ds_rows, ds_pitch)
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, c = lane % 4;
  const int64_t key_tiles = key_tiles_end(s, t0);

  const auto load_keys = [&](int64_t tile, int stage) {
    const int64_t j0 = tile * kTileRows;
    load_tile_async<T, D>(k_tiles + stage * kTileElements<D>, k, j0, s.S);
    load_block_async<T, kTileRows>(ds_tiles + stage * kTileElements<kTileRows>,
                                   ds + j0 * a.ds_pitch + t0, a.ds_pitch);
  };
  if (key_tiles > 0) load_keys(0, 0);
  commit_async();
  float dq[D / 8][4] = {};

  for (int64_t tile = 0; tile < key_tiles; ++tile) {
    const int stage = static_cast<int>(tile & 1);
    next_tile(tile, key_tiles, load_keys);
    const T* k_tile = k_tiles + stage * kTileElements<D>;
    const T* ds_tile = ds_tiles + stage * kTileElements<kTileRows>;
#pragma unroll
    for (int kk = 0; kk < kTileRows / 16; ++kk) {  // 16 keys at a time
      uint32_t a_frag[4];                          // dS rows warp·16.. (queries) × keys kk·16..
      load_a_transposed(a_frag, ds_tile, kStride<kTileRows>, warp * 16, kk * 16, lane);
      fragment_times_rows<D>(dq, a_frag, k_tile, kk * 16, lane);
    }
    __syncthreads();
  }
  wait_async<0>();
  store_rows<D>(a.dq + bh * s.T * D, dq, s.scale, t0 + warp * 16, s.T, g, c);
}

// dQ without the scratch (a single (b, KV head) pair would need more than kScratchBytes): a
// block per 64 query rows of one (b, h), streaming the visible key tiles and recomputing S,
// P and dP from Q, dO, K, V, lse and delta.
template <class T, int D>
constexpr size_t dq_recompute_shared_bytes() {  // Q, dO, 2 stages of K and of V
  return 6 * kTileElements<D> * sizeof(T);
}

template <class T, int D>
__global__ void __launch_bounds__(kThreads) flash_dq_recompute_kernel(BackwardArgs<T> a) {
  extern __shared__ __align__(16) unsigned char shared[];
  T* q_tile = reinterpret_cast<T*>(shared);  // (64, D + 8)
  T* do_tile = q_tile + kTileElements<D>;    // (64, D + 8)
  T* k_tiles = do_tile + kTileElements<D>;   // 2 × (64, D + 8)
  T* v_tiles = k_tiles + 2 * kTileElements<D>;
  __shared__ int64_t key_pos[2][kTileRows];

  const FlashShape& s = a.shape;
  const int64_t bh = blockIdx.x;
  const int64_t kv = (bh / s.H) * s.Hkv + (bh % s.H) / (s.H / s.Hkv);
  const int64_t t0 = (static_cast<int64_t>(gridDim.y) - 1 - blockIdx.y) * kTileRows;
  const T* k = a.k + kv * s.S * D;  // (S, D)
  const T* v = a.v + kv * s.S * D;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, c = lane % 4;
  const int64_t key_tiles = key_tiles_end(s, t0);

  const auto load_keys = [&](int64_t tile, int stage) {
    load_key_value_tile<T, D>(k_tiles, v_tiles, key_pos, k, v, s, tile, stage);
  };
  load_tile_async<T, D>(q_tile, a.q + bh * s.T * D, t0, s.T);
  load_tile_async<T, D>(do_tile, a.dout + bh * s.T * D, t0, s.T);
  if (key_tiles > 0) load_keys(0, 0);
  commit_async();

  int64_t query_pos[2];
  float lse[2], delta[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int64_t t = t0 + warp * 16 + g + 8 * i;
    const bool real = t < s.T;
    query_pos[i] = real ? query_position(s, t) : 0;
    lse[i] = real ? a.lse[bh * s.T + t] : INFINITY;
    delta[i] = real ? a.delta[bh * s.T + t] : 0.0f;
  }
  float dq[D / 8][4] = {};

  for (int64_t tile = 0; tile < key_tiles; ++tile) {
    const int stage = static_cast<int>(tile & 1);
    next_tile(tile, key_tiles, load_keys);
    const T* k_tile = k_tiles + stage * kTileElements<D>;
    const T* v_tile = v_tiles + stage * kTileElements<D>;
    const int64_t j0 = tile * kTileRows;

    float p[8][4] = {};  // S, then P, then dS: 16 queries × 64 keys per warp
    rows_times_rows<D, 64>(p, q_tile, k_tile, warp, lane);
    float dp[8][4] = {};  // dO·Vᵀ
    rows_times_rows<D, 64>(dp, do_tile, v_tile, warp, lane);
    const bool masked = tile_needs_mask(s, t0, j0);
#pragma unroll
    for (int nt = 0; nt < 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int i = e / 2, j = nt * 8 + 2 * c + (e & 1);
        const bool seen = !masked || (j0 + j < s.S && visible(s, query_pos[i], key_pos[stage][j]));
        const float prob = seen ? exp2f(p[nt][e] * s.scale_log2 - lse[i]) : 0.0f;
        p[nt][e] = prob * (dp[nt][e] - delta[i]);
      }
    weights_times_rows<D, 64>(dq, p, k_tile, lane);
    __syncthreads();
  }
  wait_async<0>();
  store_rows<D>(a.dq + bh * s.T * D, dq, s.scale, t0 + warp * 16, s.T, g, c);
}

// dK and dV: a block per 64 key rows of one (b, KV head) and one part of its group's heads,
// streaming kQ query rows at a time over the part's heads in order, then the visible query
// tiles in order; with kWriteScratch it also writes dSᵀ to the scratch for the dQ kernel.
template <int D>
constexpr int kBackwardQueries = D == 128 ? 32 : 64;

template <class T, int D>
constexpr size_t dkdv_shared_bytes() {
  return (2 * kTileElements<D> + 4 * kTileElements<D, kBackwardQueries<D>>)*sizeof(T);
}

template <class T, int D, bool kWriteScratch>
__global__ void __launch_bounds__(kThreads) flash_dkdv_kernel(BackwardArgs<T> a) {
  constexpr int kQ = kBackwardQueries<D>;
  extern __shared__ __align__(16) unsigned char shared[];
  T* k_tile = reinterpret_cast<T*>(shared);  // (64, D + 8)
  T* v_tile = k_tile + kTileElements<D>;     // (64, D + 8)
  T* q_tiles = v_tile + kTileElements<D>;    // 2 × (kQ, D + 8)
  T* do_tiles = q_tiles + 2 * kTileElements<D, kQ>;
  __shared__ float lse[2][kQ], delta[2][kQ];
  __shared__ int64_t query_pos[2][kQ];
  __shared__ bool real_query[2][kQ];
  __shared__ int64_t block_first_query[2];  // q0 of each stage's query block

  const FlashShape& s = a.shape;
  const int64_t kv = blockIdx.x / a.parts;  // b·Hkv + KV head
  const int part = static_cast<int>(blockIdx.x % a.parts);
  const int64_t group = s.H / s.Hkv, heads = group / a.parts;  // heads of this block's part
  const int64_t first_bh = (kv / s.Hkv) * s.H + (kv % s.Hkv) * group + part * heads;
  const int64_t j0 = static_cast<int64_t>(blockIdx.y) * kTileRows;  // causal: most work first
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, c = lane % 4;

  // Steps over (head of the group, query block of kQ rows); causal default positions skip
  // the query blocks before the first 64-row tile that sees key j0 (64, not kQ: the dQ
  // kernel reads the dS of every query of the tiles it visits, so all of them are written).
  const int64_t q_begin = query_blocks_begin(s, j0, kTileRows) * (kTileRows / kQ);
  const int64_t q_blocks = (s.T + kQ - 1) / kQ;
  const int64_t per_head = q_blocks > q_begin ? q_blocks - q_begin : 0;
  const int64_t steps = heads * per_head;

  // A step's query rows: Q and dO tiles start copying into shared memory; thread t < kQ
  // fetches query row q0 + t's statistics into registers, which publish() stores into the
  // stage's shared arrays only after the current step's products, so the loads' latency
  // hides behind them instead of stalling the warps that issue them.
  struct QueryRow {
    float lse = INFINITY, delta = 0.0f;
    int64_t pos = 0, q0 = 0;
    bool real = false;
  };
  const auto load_queries = [&](int64_t step, int stage) {
    const int64_t bh = first_bh + step / per_head;
    QueryRow row;
    row.q0 = (q_begin + step % per_head) * kQ;
    load_tile_async<T, D, kQ>(q_tiles + stage * kTileElements<D, kQ>, a.q + bh * s.T * D, row.q0,
                              s.T);
    load_tile_async<T, D, kQ>(do_tiles + stage * kTileElements<D, kQ>, a.dout + bh * s.T * D,
                              row.q0, s.T);
    const int64_t t = row.q0 + threadIdx.x;
    if (threadIdx.x < kQ && t < s.T) {
      row.real = true;
      row.lse = a.lse[bh * s.T + t];
      row.delta = a.delta[bh * s.T + t];
      row.pos = query_position(s, t);
    }
    return row;
  };
  const auto publish = [&](const QueryRow& row, int stage) {
    if (threadIdx.x == 0) block_first_query[stage] = row.q0;
    if (threadIdx.x < kQ) {
      real_query[stage][threadIdx.x] = row.real;
      lse[stage][threadIdx.x] = row.lse;
      delta[stage][threadIdx.x] = row.delta;
      query_pos[stage][threadIdx.x] = row.pos;
    }
  };
  if (steps > 0) {
    const T* k = a.k + kv * s.S * D;
    const T* v = a.v + kv * s.S * D;
    load_tile_async<T, D>(k_tile, k, j0, s.S);
    load_tile_async<T, D>(v_tile, v, j0, s.S);
    publish(load_queries(0, 0), 0);
    commit_async();
  }

  // This thread's two key rows: tile rows warp·16 + g and + 8.
  int64_t key_pos[2];
  bool real_key[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int64_t j = j0 + warp * 16 + g + 8 * i;
    real_key[i] = j < s.S;
    key_pos[i] = real_key[i] ? key_position(s, j) : 0;
  }
  float dk[D / 8][4] = {}, dv[D / 8][4] = {};

  for (int64_t step = 0; step < steps; ++step) {
    const int stage = static_cast<int>(step & 1);
    QueryRow next;
    if (step + 1 < steps) {  // next_tile's step, with the next queries' statistics kept
      next = load_queries(step + 1, stage ^ 1);
      commit_async();
      wait_async<1>();
    } else {
      wait_async<0>();
    }
    __syncthreads();
    const T* q_tile = q_tiles + stage * kTileElements<D, kQ>;
    const T* do_tile = do_tiles + stage * kTileElements<D, kQ>;

    float p[kQ / 8][4] = {};  // Sᵀ, then Pᵀ: 16 keys × kQ queries per warp
    rows_times_rows<D, kQ>(p, k_tile, q_tile, warp, lane);
    float ds[kQ / 8][4] = {};  // (dO·Vᵀ)ᵀ = V·dOᵀ, then dSᵀ
    rows_times_rows<D, kQ>(ds, v_tile, do_tile, warp, lane);
    // The same arithmetic in both branches; only tiles that need the mask test each pair.
    if (tile_needs_mask(s, block_first_query[stage], j0)) {
#pragma unroll
      for (int nt = 0; nt < kQ / 8; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int i = e / 2, n = nt * 8 + 2 * c + (e & 1);
          const bool seen =
              real_key[i] && real_query[stage][n] && visible(s, query_pos[stage][n], key_pos[i]);
          p[nt][e] = seen ? exp2f(p[nt][e] * s.scale_log2 - lse[stage][n]) : 0.0f;
          ds[nt][e] = p[nt][e] * (ds[nt][e] - delta[stage][n]);
        }
    } else {
#pragma unroll
      for (int nt = 0; nt < kQ / 8; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int n = nt * 8 + 2 * c + (e & 1);
          p[nt][e] = exp2f(p[nt][e] * s.scale_log2 - lse[stage][n]);
          ds[nt][e] = p[nt][e] * (ds[nt][e] - delta[stage][n]);
        }
    }
    weights_times_rows<D, kQ>(dv, p, do_tile, lane);
    weights_times_rows<D, kQ>(dk, ds, q_tile, lane);
    if constexpr (kWriteScratch) {  // dSᵀ rows of this warp's keys, queries q0.. of the step's head
      T* ds_out = a.ds +
                  ((first_bh + step / per_head) * a.ds_rows + j0 + warp * 16 + g) * a.ds_pitch +
                  block_first_query[stage] + 2 * c;
#pragma unroll
      for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int nt = 0; nt < kQ / 8; ++nt)
          *reinterpret_cast<uint32_t*>(ds_out + 8 * i * a.ds_pitch + nt * 8) =
              pack_pair<T>(ds[nt][2 * i], ds[nt][2 * i + 1]);
    }
    if (step + 1 < steps) publish(next, stage ^ 1);  // the stage no warp reads now
    __syncthreads();
  }
  if (a.parts > 1) {  // this part's sums; flash_sum_parts_kernel scales and rounds their total
    const int64_t r0 = (part * s.B * s.Hkv + kv) * s.S;  // this part's rows of (b, KV head)
    store_rows<D>(a.dk_parts + r0 * D, dk, 1.0f, j0 + warp * 16, s.S, g, c);
    store_rows<D>(a.dv_parts + r0 * D, dv, 1.0f, j0 + warp * 16, s.S, g, c);
    return;
  }
  const int64_t r0 = kv * s.S;  // dk and dv rows of this (b, KV head) start here
  store_rows<D>(a.dk + r0 * D, dk, s.scale, j0 + warp * 16, s.S, g, c);
  store_rows<D>(a.dv + r0 * D, dv, 1.0f, j0 + warp * 16, s.S, g, c);
}

// dK = scale · Σ_parts dk_parts, dV = Σ_parts dv_parts, the parts added in order; n = B·Hkv·S·D
// elements, four per thread (D is a multiple of 4).
template <class T>
__global__ void flash_sum_parts_kernel(const float* dk_parts, const float* dv_parts, T* dk, T* dv,
                                       int parts, int64_t n, float scale) {
  const int64_t i = 4 * (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x);
  if (i >= n) return;
  float4 k = *reinterpret_cast<const float4*>(dk_parts + i);
  float4 v = *reinterpret_cast<const float4*>(dv_parts + i);
  for (int p = 1; p < parts; ++p) {
    const float4 kp = *reinterpret_cast<const float4*>(dk_parts + p * n + i);
    const float4 vp = *reinterpret_cast<const float4*>(dv_parts + p * n + i);
    k = make_float4(k.x + kp.x, k.y + kp.y, k.z + kp.z, k.w + kp.w);
    v = make_float4(v.x + vp.x, v.y + vp.y, v.z + vp.z, v.w + vp.w);
  }
  const float ks[4] = {k.x, k.y, k.z, k.w}, vs[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    dk[i + e] = from_float<T>(ks[e] * scale);
    dv[i + e] = from_float<T>(vs[e]);
  }
}

// Parts of a group's heads per dK/dV block: 1 when (b, KV head, key tile) blocks alone fill
// the GPU several times over; else the group's smallest divisor that makes enough blocks for
// the causal triangle's unequal blocks to even out (B8 H14 KV2 T1024: 256 blocks of up to
// 112 query-tile steps become 1,792 of up to 16).
int dkdv_parts(const FlashShape& s) {
  constexpr int64_t kEnoughBlocks = 1024;  // ~4 per SM of a 132-SM H200 at 2 resident
  const int64_t group = s.H / s.Hkv, blocks = s.B * s.Hkv * tiles_of(s.S);
  for (int64_t p = 1; p < group; ++p)
    if (group % p == 0 && blocks * p >= kEnoughBlocks) return static_cast<int>(p);
  return static_cast<int>(group);
}

// The kernels in order over one chunk: delta, dK/dV (which writes the dS scratch when there
// is one), the sum of the parts, dQ (which reads it, or recomputes dS without it).
// With `wgmma` (BF16, D 64 only) the dK/dV and dQ kernels are the Hopper ones
// (flash_attention_wgmma_backward_cuda.cu), on a scratch of 128-rounded rows and columns.
template <class T, int D>
void launch_backward(const BackwardArgs<T>& args, const T* out, float* delta, cudaStream_t stream,
                     bool wgmma) {
  constexpr bool kHasWgmma = std::is_same_v<T, __nv_bfloat16> && D == 64;  // else never wgmma
  const FlashShape& s = args.shape;
  const int64_t rows = s.B * s.H * s.T;
  if (rows > 0) {
    constexpr int kDeltaThreads = 256;
    const int64_t threads = rows * kDeltaLanes<T, D>;
    flash_delta_kernel<T, D>
        <<<static_cast<unsigned>(ceil_div(threads, kDeltaThreads)), kDeltaThreads, 0, stream>>>(
            out, args.dout, delta, rows);
    CUDA_CHECK_LAUNCH("flash_delta_kernel");
  }
  if (s.B * s.Hkv * s.S > 0) {  // with T = 0 this writes zeros to dK and dV
    const size_t bytes = dkdv_shared_bytes<T, D>();
    const dim3 grid(static_cast<unsigned>(s.B * s.Hkv * args.parts),
                    static_cast<unsigned>(tiles_of(s.S)));
    // Two instantiations, so the loop of the kernel that writes the scratch carries no test.
    if (wgmma) {
      if constexpr (kHasWgmma) launch_dkdv_wgmma(args, stream);
    } else if (args.ds != nullptr) {
      allow_shared_bytes<flash_dkdv_kernel<T, D, true>>(bytes);
      flash_dkdv_kernel<T, D, true><<<grid, kThreads, bytes, stream>>>(args);
    } else {
      allow_shared_bytes<flash_dkdv_kernel<T, D, false>>(bytes);
      flash_dkdv_kernel<T, D, false><<<grid, kThreads, bytes, stream>>>(args);
    }
    CUDA_CHECK_LAUNCH("flash_dkdv_kernel");
    if (args.parts > 1) {
      const int64_t n = s.B * s.Hkv * s.S * D;
      constexpr int kSumThreads = 256;
      flash_sum_parts_kernel<T>
          <<<static_cast<unsigned>((n / 4 + kSumThreads - 1) / kSumThreads), kSumThreads, 0,
             stream>>>(args.dk_parts, args.dv_parts, args.dk, args.dv, args.parts, n, s.scale);
      CUDA_CHECK_LAUNCH("flash_sum_parts_kernel");
    }
  }
  const dim3 dq_grid(static_cast<unsigned>(s.B * s.H), static_cast<unsigned>(tiles_of(s.T)));
  if (rows > 0 && wgmma) {
    if constexpr (kHasWgmma) launch_dq_wgmma(args, stream);
  } else if (rows > 0 && args.ds != nullptr) {
    const size_t bytes = dq_shared_bytes<T, D>();
    allow_shared_bytes<flash_dq_kernel<T, D>>(bytes);
    flash_dq_kernel<T, D><<<dq_grid, kThreads, bytes, stream>>>(args);
    CUDA_CHECK_LAUNCH("flash_dq_kernel");
  } else if (rows > 0) {
    const size_t bytes = dq_recompute_shared_bytes<T, D>();
    allow_shared_bytes<flash_dq_recompute_kernel<T, D>>(bytes);
    flash_dq_recompute_kernel<T, D><<<dq_grid, kThreads, bytes, stream>>>(args);
    CUDA_CHECK_LAUNCH("flash_dq_recompute_kernel");
  }
}

// The dS scratch of one chunk stays under this many bytes (B8 H14 KV2 T1024: 235 MB, one
// chunk; T 8192 with a group of 2: 268 MB a pair, two pairs a chunk). Where a single
// (b, KV head) pair would need more, there is no scratch and dQ recomputes dS.
constexpr int64_t kScratchBytes = int64_t{512} << 20;

}  // namespace

void flash_attention_backward_cuda(const AttentionShape& shape, const Tensor& q, const Tensor& k,
                                   const Tensor& v, const Tensor& out, const Tensor& lse,
                                   const Tensor& dout, const Tensor& q_pos, const Tensor& k_pos,
                                   const Tensor& dq, const Tensor& dk, const Tensor& dv) {
  const FlashShape whole = flash_shape_of(shape, q_pos, k_pos);
  // A unit is one (b, KV head) with its group's query heads, whose rows are neighbours in
  // every tensor; the kernels see a chunk of units as a batch with H = group, Hkv = 1.
  const int64_t group = whole.H / whole.Hkv, units = whole.B * whole.Hkv, D = shape.D;
  const auto unit_bytes_of = [&](int64_t ds_rows, int64_t ds_pitch) {
    return group * ds_rows * ds_pitch * static_cast<int64_t>(dtype_size(q.dtype()));
  };
  // The wgmma kernels (opt-in) where they apply and their scratch fits a chunk.
  const bool wgmma =
      D == 64 && flash_wgmma_enabled() && flash_wgmma_forward_applies(shape, q, q_pos, k_pos) &&
      unit_bytes_of(wgmma_scratch_rows(whole.S), wgmma_scratch_rows(whole.T)) <= kScratchBytes;
  const int64_t ds_rows = wgmma ? wgmma_scratch_rows(whole.S) : tiles_of(whole.S) * kTileRows;
  const int64_t ds_pitch = wgmma ? wgmma_scratch_rows(whole.T) : tiles_of(whole.T) * kTileRows;
  const int64_t unit_bytes = unit_bytes_of(ds_rows, ds_pitch);
  const bool with_scratch = unit_bytes <= kScratchBytes;
  const int64_t per_chunk =
      !with_scratch || unit_bytes == 0 ? units : std::min(units, kScratchBytes / unit_bytes);
  // delta (B, H, T) F32 and the scratch (per_chunk·group, ds_rows, ds_pitch), from the
  // stream-ordered allocator: freed on return, reused only by later work on the same stream.
  const Tensor delta = Tensor::empty({whole.B, whole.H, whole.T}, DType::F32, q.device());
  Tensor scratch;
  if (with_scratch)
    scratch = Tensor::empty({per_chunk * group, ds_rows, ds_pitch}, q.dtype(), q.device());
  const auto run = [&](auto tag) {
    using T = decltype(tag);
    for (int64_t u0 = 0; u0 < units; u0 += per_chunk) {
      FlashShape s = whole;
      s.B = std::min(per_chunk, units - u0);
      s.H = group;
      s.Hkv = 1;
      // The dK/dV parts' F32 sums (parts, chunk units, S, D) each.
      const int parts = wgmma ? wgmma_dkdv_parts(s) : dkdv_parts(s);
      Tensor dk_parts, dv_parts;
      if (parts > 1) {
        dk_parts = Tensor::empty({parts, s.B, whole.S, D}, DType::F32, q.device());
        dv_parts = Tensor::empty({parts, s.B, whole.S, D}, DType::F32, q.device());
      }
      const int64_t query_rows = u0 * group * whole.T,
                    key_rows = u0 * whole.S;  // the chunk's first rows
      const BackwardArgs<T> args{s,
                                 ptr<const T>(q) + query_rows * D,
                                 ptr<const T>(k) + key_rows * D,
                                 ptr<const T>(v) + key_rows * D,
                                 ptr<const T>(dout) + query_rows * D,
                                 ptr<const float>(lse) + query_rows,
                                 ptr<const float>(delta) + query_rows,
                                 ptr<T>(dq) + query_rows * D,
                                 ptr<T>(dk) + key_rows * D,
                                 ptr<T>(dv) + key_rows * D,
                                 parts,
                                 parts > 1 ? ptr<float>(dk_parts) : nullptr,
                                 parts > 1 ? ptr<float>(dv_parts) : nullptr,
                                 with_scratch ? ptr<T>(scratch) : nullptr,
                                 ds_rows,
                                 ds_pitch};
      const T* out_rows = ptr<const T>(out) + query_rows * D;
      float* delta_rows = ptr<float>(delta) + query_rows;
      if (D == 64)
        launch_backward<T, 64>(args, out_rows, delta_rows, stream_of(dq), wgmma);
      else
        launch_backward<T, 128>(args, out_rows, delta_rows, stream_of(dq), wgmma);
    }
  };
  if (q.dtype() == DType::BF16)
    run(__nv_bfloat16{});
  else if (q.dtype() == DType::F16)
    run(__half{});
  else
    MICROLLM_FAIL("attention", "flash attention takes bf16 or f16, found ", q.describe());
}

}  // namespace microllm::ops
