// Flash attention backward on tensor cores (mma.sync), deterministic: no atomics.
// Reference: Dao 2023 (FlashAttention-2), section 3.1.2, for the recomputation; the split
// into two kernels, one owning dQ rows and one owning dK/dV rows, is what removes the
// atomic dQ accumulation (at the price of computing S and dP twice).
//   delta = rowsum(dO ∘ O)                                         (B, H, T)
//   P = exp2(S₂ − lse₂), dP = dO·Vᵀ, dS = P ∘ (dP − delta)
//   dQ = scale · dS·K                  (query-tile blocks, key tiles in order)
//   dK = scale · dSᵀ·Q, dV = Pᵀ·dO    (key-tile blocks, a part of the group's heads and the
//                                      query tiles in order; with the group split into
//                                      parts, F32 sums per part added in part order by
//                                      flash_sum_parts_kernel: the GQA sum has one fixed order)
// The streamed side of each kernel is double-buffered with cp.async. Both kernels start with
// their heaviest blocks (causal: the last query tiles for dQ, the first key tiles for dK/dV),
// so the long blocks are not left for the end of the grid.
#include <type_traits>

#include "../cuda_common.cuh"
#include "attention_kernels.h"
#include "flash_attention.cuh"

namespace microllm::ops {
namespace {

using namespace cuda_detail;
using namespace flash;

// q, out, dout, dq (B, H, T, D); k, v, dk, dv (B, Hkv, S, D); lse, delta (B, H, T) F32.
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
};

// delta[row] = Σ_d dO[row, d]·O[row, d] in F32, a warp per row.
template <class T, int D>
__global__ void flash_delta_kernel(const T* out, const T* dout, float* delta, int64_t rows) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  if (row >= rows) return;
  const int lane = threadIdx.x % 32;
  float sum = 0.0f;
  for (int d = lane; d < D; d += 32)
    sum += to_float(out[row * D + d]) * to_float(dout[row * D + d]);
  sum = warp_sum(sum);
  if (lane == 0) delta[row] = sum;
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
#pragma unroll
    for (int pair = 0; pair < D / 16; ++pair) {
      uint32_t b[2][2];
      load_b_pair_transposed(b, tile, kStride<D>, kk * 16, pair * 16, lane);
      mma_16816<T>(acc[2 * pair], a, b[0]);
      mma_16816<T>(acc[2 * pair + 1], a, b[1]);
    }
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

// dQ: a block per 64 query rows of one (b, h), streaming the visible key tiles.
template <class T, int D>
__global__ void __launch_bounds__(kThreads) flash_dq_kernel(BackwardArgs<T> a) {
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
    const int64_t j0 = tile * kTileRows;
    load_tile_async<T, D>(k_tiles + stage * kTileElements<D>, k, j0, s.S);
    load_tile_async<T, D>(v_tiles + stage * kTileElements<D>, v, j0, s.S);
    if (threadIdx.x < kTileRows && j0 + threadIdx.x < s.S)
      key_pos[stage][threadIdx.x] = key_position(s, j0 + threadIdx.x);
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
    if (tile + 1 < key_tiles) {
      load_keys(tile + 1, stage ^ 1);
      commit_async();
      wait_async<1>();
    } else {
      wait_async<0>();
    }
    __syncthreads();
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
// tiles in order.
template <int D>
constexpr int kBackwardQueries = D == 128 ? 32 : 64;

template <class T, int D>
constexpr size_t dkdv_shared_bytes() {
  return (2 * kTileElements<D> + 4 * kTileElements<D, kBackwardQueries<D>>)*sizeof(T);
}

template <class T, int D>
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
  // the query blocks before the first one that sees key j0.
  const int64_t q_begin = query_blocks_begin(s, j0, kQ);
  const int64_t q_blocks = (s.T + kQ - 1) / kQ;
  const int64_t per_head = q_blocks > q_begin ? q_blocks - q_begin : 0;
  const int64_t steps = heads * per_head;

  const auto load_queries = [&](int64_t step, int stage) {
    const int64_t bh = first_bh + step / per_head;
    const int64_t q0 = (q_begin + step % per_head) * kQ;
    load_tile_async<T, D, kQ>(q_tiles + stage * kTileElements<D, kQ>, a.q + bh * s.T * D, q0, s.T);
    load_tile_async<T, D, kQ>(do_tiles + stage * kTileElements<D, kQ>, a.dout + bh * s.T * D, q0,
                              s.T);
    if (threadIdx.x == 0) block_first_query[stage] = q0;
    if (threadIdx.x < kQ) {
      const int64_t t = q0 + threadIdx.x;
      const bool real = t < s.T;
      real_query[stage][threadIdx.x] = real;
      lse[stage][threadIdx.x] = real ? a.lse[bh * s.T + t] : INFINITY;
      delta[stage][threadIdx.x] = real ? a.delta[bh * s.T + t] : 0.0f;
      query_pos[stage][threadIdx.x] = real ? query_position(s, t) : 0;
    }
  };
  if (steps > 0) {
    const T* k = a.k + kv * s.S * D;
    const T* v = a.v + kv * s.S * D;
    load_tile_async<T, D>(k_tile, k, j0, s.S);
    load_tile_async<T, D>(v_tile, v, j0, s.S);
    load_queries(0, 0);
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
    if (step + 1 < steps) {
      load_queries(step + 1, stage ^ 1);
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
    const bool masked = tile_needs_mask(s, block_first_query[stage], j0);
#pragma unroll
    for (int nt = 0; nt < kQ / 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int i = e / 2, n = nt * 8 + 2 * c + (e & 1);
        const bool seen = !masked || (real_key[i] && real_query[stage][n] &&
                                      visible(s, query_pos[stage][n], key_pos[i]));
        p[nt][e] = seen ? exp2f(p[nt][e] * s.scale_log2 - lse[stage][n]) : 0.0f;
        ds[nt][e] = p[nt][e] * (ds[nt][e] - delta[stage][n]);
      }
    weights_times_rows<D, kQ>(dv, p, do_tile, lane);
    weights_times_rows<D, kQ>(dk, ds, q_tile, lane);
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

template <class T, int D>
void launch_backward(const BackwardArgs<T>& args, const T* out, float* delta, cudaStream_t stream) {
  const FlashShape& s = args.shape;
  const int64_t rows = s.B * s.H * s.T;
  if (rows > 0) {
    constexpr int kRowsPerBlock = 8;
    flash_delta_kernel<T, D><<<static_cast<unsigned>((rows + kRowsPerBlock - 1) / kRowsPerBlock),
                               32 * kRowsPerBlock, 0, stream>>>(out, args.dout, delta, rows);
    CUDA_CHECK_LAUNCH("flash_delta_kernel");
    const size_t dq_bytes = static_cast<size_t>(6 * kTileElements<D>) * sizeof(T);
    allow_shared_bytes<flash_dq_kernel<T, D>>(dq_bytes);
    flash_dq_kernel<T, D>
        <<<dim3(static_cast<unsigned>(s.B * s.H), static_cast<unsigned>(tiles_of(s.T))), kThreads,
           dq_bytes, stream>>>(args);
    CUDA_CHECK_LAUNCH("flash_dq_kernel");
  }
  if (s.B * s.Hkv * s.S > 0) {  // with T = 0 this writes zeros to dK and dV
    const size_t bytes = dkdv_shared_bytes<T, D>();
    allow_shared_bytes<flash_dkdv_kernel<T, D>>(bytes);
    flash_dkdv_kernel<T, D><<<dim3(static_cast<unsigned>(s.B * s.Hkv * args.parts),
                                   static_cast<unsigned>(tiles_of(s.S))),
                              kThreads, bytes, stream>>>(args);
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
}

}  // namespace

void flash_attention_backward_cuda(const AttentionShape& shape, const Tensor& q, const Tensor& k,
                                   const Tensor& v, const Tensor& out, const Tensor& lse,
                                   const Tensor& dout, const Tensor& q_pos, const Tensor& k_pos,
                                   const Tensor& dq, const Tensor& dk, const Tensor& dv) {
  const FlashShape s = flash_shape_of(shape, q_pos, k_pos);
  // delta (B, H, T) F32, from the stream-ordered allocator: freed on return, reused only by
  // later work on the same stream.
  const Tensor delta = Tensor::empty({s.B, s.H, s.T}, DType::F32, q.device());
  // The dK/dV parts' F32 sums (parts, B·Hkv, S, D) each, from the same allocator.
  const int parts = dkdv_parts(s);
  Tensor dk_parts, dv_parts;
  if (parts > 1) {
    dk_parts = Tensor::empty({parts, s.B * s.Hkv, s.S, shape.D}, DType::F32, q.device());
    dv_parts = Tensor::empty({parts, s.B * s.Hkv, s.S, shape.D}, DType::F32, q.device());
  }
  const auto run = [&](auto tag) {
    using T = decltype(tag);
    const BackwardArgs<T> args{s,
                               ptr<const T>(q),
                               ptr<const T>(k),
                               ptr<const T>(v),
                               ptr<const T>(dout),
                               ptr<const float>(lse),
                               ptr<const float>(delta),
                               ptr<T>(dq),
                               ptr<T>(dk),
                               ptr<T>(dv),
                               parts,
                               parts > 1 ? ptr<float>(dk_parts) : nullptr,
                               parts > 1 ? ptr<float>(dv_parts) : nullptr};
    if (shape.D == 64)
      launch_backward<T, 64>(args, ptr<const T>(out), ptr<float>(delta), stream_of(dq));
    else
      launch_backward<T, 128>(args, ptr<const T>(out), ptr<float>(delta), stream_of(dq));
  };
  if (q.dtype() == DType::BF16)
    run(__nv_bfloat16{});
  else if (q.dtype() == DType::F16)
    run(__half{});
  else
    MICROLLM_FAIL("attention", "flash attention takes bf16 or f16, found ", q.describe());
}

}  // namespace microllm::ops
