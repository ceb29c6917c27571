// Flash attention forward on tensor cores (mma.sync), BF16/F16 in, F32 accumulation.
// Reference: Dao et al. 2022 (FlashAttention) and Dao 2023 (FlashAttention-2): the scores
// of a query tile are computed key tile by key tile with an online softmax, so the (T, S)
// probabilities never reach memory; only the output and one log-sum-exp per query row do.
//
// A block owns 64 query rows of one (b, h), 16 per warp. Per key tile of 64 rows:
//   S = Q·Kᵀ (registers) → mask → running max m and sum l per row, O rescaled by
//   exp2(m_old − m_new) → P = exp2(S − m) packed to 16 bits → O += P·V.
// K and V tiles are double-buffered with cp.async: tile k+1 loads while tile k computes.
// Every output element has one owner and a fixed order of work: results are deterministic.
#include "../cuda_common.cuh"
#include "attention_kernels.h"
#include "flash_attention.cuh"

namespace microllm::ops {
namespace {

using namespace cuda_detail;
using namespace flash;

// q, out (B, H, T, D); k, v (B, Hkv, S, D); lse (B, H, T) F32, all dense.
template <class T>
struct ForwardArgs {
  FlashShape shape;
  const T* q;
  const T* k;
  const T* v;
  T* out;
  float* lse;
};

template <int D>
constexpr size_t forward_shared_bytes(size_t element) {
  return static_cast<size_t>(5 * kTileElements<D>) * element;  // Q + 2 × (K + V)
}

// S = Q·Kᵀ for a warp's 16 query rows (its A fragments) and the 64 keys of a tile: 16 × 64
// as 8 accumulator tiles of 8 keys.
template <class T, int D>
__device__ __forceinline__ void tile_scores(float (&sc)[8][4], const uint32_t (&q_frag)[D / 16][4],
                                            const T* k_tile, int lane) {
#pragma unroll
  for (int nt = 0; nt < 8; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) sc[nt][e] = 0.0f;
#pragma unroll
  for (int ks = 0; ks < D / 16; ++ks)
#pragma unroll
    for (int pair = 0; pair < 4; ++pair) {
      uint32_t b[2][2];
      load_b_pair(b, k_tile, kStride<D>, pair * 16, ks * 16, lane);
      mma_16816<T>(sc[2 * pair], q_frag[ks], b[0]);
      mma_16816<T>(sc[2 * pair + 1], q_frag[ks], b[1]);
    }
}

// The mask and the online softmax of one key tile for a thread's two query rows (a row's 64
// scores sit in the 4 lanes of g), then O += P·V: the scores in sc become P, the running
// max and sum and the output accumulator move on by one tile.
template <class T, int D>
__device__ __forceinline__ void softmax_and_values(float (&sc)[8][4], float (&o)[D / 8][4],
                                                   float (&row_max)[2], float (&row_sum)[2],
                                                   bool masked, const FlashShape& s, int64_t j0,
                                                   const int64_t (&query_pos)[2],
                                                   const int64_t* key_pos, const T* v_tile,
                                                   int lane) {
  const int c = lane % 4;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    // The same rounded product either way (__fmul_rn: never contracted into the FMA of
    // the exponent below); only tiles that need the mask test each pair.
    if (masked) {
#pragma unroll
      for (int nt = 0; nt < 8; ++nt)
#pragma unroll
        for (int e = 2 * i; e < 2 * i + 2; ++e) {
          const int j = nt * 8 + 2 * c + (e & 1);
          const bool seen = j0 + j < s.S && visible(s, query_pos[i], key_pos[j]);
          sc[nt][e] = seen ? __fmul_rn(sc[nt][e], s.scale_log2) : -INFINITY;
        }
    } else {
#pragma unroll
      for (int nt = 0; nt < 8; ++nt)
#pragma unroll
        for (int e = 2 * i; e < 2 * i + 2; ++e) sc[nt][e] = __fmul_rn(sc[nt][e], s.scale_log2);
    }
    float tile_max = -INFINITY;
#pragma unroll
    for (int nt = 0; nt < 8; ++nt)
#pragma unroll
      for (int e = 2 * i; e < 2 * i + 2; ++e) tile_max = fmaxf(tile_max, sc[nt][e]);
    tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
    tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 2));
    const float new_max = fmaxf(row_max[i], tile_max);
    const float base = new_max == -INFINITY ? 0.0f : new_max;  // no visible key yet
    const float rescale = exp2f(row_max[i] - base);
    row_max[i] = new_max;
    row_sum[i] *= rescale;
#pragma unroll
    for (int nt = 0; nt < D / 8; ++nt) {
      o[nt][2 * i] *= rescale;
      o[nt][2 * i + 1] *= rescale;
    }
#pragma unroll
    for (int nt = 0; nt < 8; ++nt)
#pragma unroll
      for (int e = 2 * i; e < 2 * i + 2; ++e) {
        sc[nt][e] = exp2f(sc[nt][e] - base);
        row_sum[i] += sc[nt][e];
      }
  }
  // O += P·V, 16 keys per step: accumulator tiles 2kk and 2kk+1 are the A operand.
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
    const uint32_t p[4] = {pack_pair<T>(sc[2 * kk][0], sc[2 * kk][1]),
                           pack_pair<T>(sc[2 * kk][2], sc[2 * kk][3]),
                           pack_pair<T>(sc[2 * kk + 1][0], sc[2 * kk + 1][1]),
                           pack_pair<T>(sc[2 * kk + 1][2], sc[2 * kk + 1][3])};
    fragment_times_rows<D>(o, p, v_tile, kk * 16, lane);
  }
}

// A thread's two query rows (tile rows warp·16 + g and + 8): their mask positions.
__device__ __forceinline__ void query_positions(int64_t (&query_pos)[2], const FlashShape& s,
                                                int64_t t0, int warp, int g) {
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int64_t t = t0 + warp * 16 + g + 8 * i;
    query_pos[i] = t < s.T ? query_position(s, t) : 0;
  }
}

// The output rows O / l and the log-sum-exp of a thread's two query rows.
template <class T, int D>
__device__ __forceinline__ void store_output(const ForwardArgs<T>& a, const float (&o)[D / 8][4],
                                             const float (&row_max)[2], const float (&row_sum)[2],
                                             int64_t bh, int64_t t0, int warp, int lane) {
  const FlashShape& s = a.shape;
  const int g = lane / 4, c = lane % 4;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    float total = row_sum[i];
    total += __shfl_xor_sync(0xffffffffu, total, 1);
    total += __shfl_xor_sync(0xffffffffu, total, 2);
    const int64_t t = t0 + warp * 16 + g + 8 * i;
    if (t >= s.T) continue;
    const float inverse = total > 0.0f ? 1.0f / total : 0.0f;  // no visible key: zeros
    T* out_row = a.out + (bh * s.T + t) * D + 2 * c;
#pragma unroll
    for (int nt = 0; nt < D / 8; ++nt)
      *reinterpret_cast<uint32_t*>(out_row + nt * 8) =
          pack_pair<T>(o[nt][2 * i] * inverse, o[nt][2 * i + 1] * inverse);
    if (c == 0) a.lse[bh * s.T + t] = total > 0.0f ? row_max[i] + log2f(total) : INFINITY;
  }
}

template <class T, int D>
__global__ void __launch_bounds__(kThreads) flash_forward_kernel(ForwardArgs<T> a) {
  extern __shared__ __align__(16) unsigned char shared[];
  T* q_tile = reinterpret_cast<T*>(shared);  // (64, D + 8)
  T* k_tiles = q_tile + kTileElements<D>;    // 2 × (64, D + 8)
  T* v_tiles = k_tiles + 2 * kTileElements<D>;
  __shared__ int64_t key_pos[2][kTileRows];  // mask positions of each stage's keys

  const FlashShape& s = a.shape;
  const int64_t bh = blockIdx.x;  // b·H + h
  const int64_t kv = (bh / s.H) * s.Hkv + (bh % s.H) / (s.H / s.Hkv);
  // Causal rows grow with the tile index: the longest tiles start first.
  const int64_t t0 = (static_cast<int64_t>(gridDim.y) - 1 - blockIdx.y) * kTileRows;
  const T* q = a.q + bh * s.T * D;  // (T, D)
  const T* k = a.k + kv * s.S * D;  // (S, D)
  const T* v = a.v + kv * s.S * D;  // (S, D)
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4;
  const int64_t key_tiles = key_tiles_end(s, t0);

  const auto load_keys = [&](int64_t tile, int stage) {
    load_key_value_tile<T, D>(k_tiles, v_tiles, key_pos, k, v, s, tile, stage);
  };
  load_tile_async<T, D>(q_tile, q, t0, s.T);
  if (key_tiles > 0) load_keys(0, 0);
  commit_async();

  int64_t query_pos[2];
  query_positions(query_pos, s, t0, warp, g);
  uint32_t q_frag[D / 16][4];  // the warp's 16 query rows as A operands, loaded once
  float o[D / 8][4] = {};      // output accumulator, 16 × D per warp
  float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.0f, 0.0f};

  for (int64_t tile = 0; tile < key_tiles; ++tile) {
    const int stage = static_cast<int>(tile & 1);
    next_tile(tile, key_tiles, load_keys);
    if (tile == 0)
#pragma unroll
      for (int ks = 0; ks < D / 16; ++ks)
        load_a(q_frag[ks], q_tile, kStride<D>, warp * 16, ks * 16, lane);
    float sc[8][4];  // S, then P: 16 × 64 per warp
    tile_scores<T, D>(sc, q_frag, k_tiles + stage * kTileElements<D>, lane);
    const int64_t j0 = tile * kTileRows;
    softmax_and_values<T, D>(sc, o, row_max, row_sum, tile_needs_mask(s, t0, j0), s, j0, query_pos,
                             key_pos[stage], v_tiles + stage * kTileElements<D>, lane);
    __syncthreads();  // the next iteration's load reuses this stage
  }
  wait_async<0>();  // a tile without visible keys never waited for its Q copy
  store_output<T, D>(a, o, row_max, row_sum, bh, t0, warp, lane);
}

template <class T, int D>
void launch_forward(const ForwardArgs<T>& args, cudaStream_t stream) {
  const size_t bytes = forward_shared_bytes<D>(sizeof(T));
  const dim3 grid(static_cast<unsigned>(args.shape.B * args.shape.H),
                  static_cast<unsigned>(tiles_of(args.shape.T)));
  allow_shared_bytes<flash_forward_kernel<T, D>>(bytes);
  flash_forward_kernel<T, D><<<grid, kThreads, bytes, stream>>>(args);
  CUDA_CHECK_LAUNCH("flash_forward_kernel");
}

}  // namespace

namespace flash {

FlashShape flash_shape_of(const AttentionShape& s, const Tensor& q_pos, const Tensor& k_pos) {
  using cuda_detail::ptr;
  MICROLLM_CHECK(s.D == 64 || s.D == 128, "attention",
                 "flash attention takes head dims 64 and 128, found D = ", s.D);
  MICROLLM_CHECK(s.Hkv > 0 && s.H % s.Hkv == 0, "attention", "query heads ", s.H,
                 " are not a multiple of KV heads ", s.Hkv);
  MICROLLM_CHECK(
      s.B * s.H <= INT32_MAX && s.B * s.Hkv <= INT32_MAX && tiles_of(std::max(s.T, s.S)) <= 65535,
      "attention", "too many heads or rows for the flash grid: B ", s.B, " H ", s.H, " T ", s.T,
      " S ", s.S);
  MICROLLM_CHECK(q_pos.defined() == k_pos.defined(), "attention",
                 "flash attention takes both positions or neither");
  for (const Tensor* p : {&q_pos, &k_pos})
    MICROLLM_CHECK(!p->defined() || (p->dtype() == DType::I64 && p->is_contiguous()), "attention",
                   "positions must be dense i64, found ", p->describe());
  const float scale = static_cast<float>(s.scale);
  return FlashShape{s.B,
                    s.H,
                    s.Hkv,
                    s.T,
                    s.S,
                    s.causal,
                    scale,
                    static_cast<float>(s.scale * 1.4426950408889634),
                    q_pos.defined() ? ptr<const int64_t>(q_pos) : nullptr,
                    k_pos.defined() ? ptr<const int64_t>(k_pos) : nullptr};
}

}  // namespace flash

void flash_attention_forward_cuda(const AttentionShape& shape, const Tensor& q, const Tensor& k,
                                  const Tensor& v, const Tensor& q_pos, const Tensor& k_pos,
                                  const Tensor& out, const Tensor& lse) {
  const flash::FlashShape s = flash_shape_of(shape, q_pos, k_pos);
  MICROLLM_CHECK(lse.dtype() == DType::F32 && lse.numel() == s.B * s.H * s.T, "attention",
                 "flash attention saves an f32 (B, H, T) log-sum-exp, found ", lse.describe());
  if (s.B * s.H * s.T == 0) return;
  if (flash_wgmma_forward_enabled(shape.D) && flash_wgmma_forward_applies(shape, q, q_pos, k_pos))
    return flash_attention_forward_wgmma_cuda(shape, q, k, v, out, lse);
  const auto run = [&](auto tag) {
    using T = decltype(tag);
    const ForwardArgs<T> args{s,           ptr<const T>(q), ptr<const T>(k), ptr<const T>(v),
                              ptr<T>(out), ptr<float>(lse)};
    if (shape.D == 64)
      launch_forward<T, 64>(args, stream_of(out));
    else
      launch_forward<T, 128>(args, stream_of(out));
  };
  if (q.dtype() == DType::BF16)
    run(__nv_bfloat16{});
  else if (q.dtype() == DType::F16)
    run(__half{});
  else
    MICROLLM_FAIL("attention", "flash attention takes bf16 or f16, found ", q.describe());
}

}  // namespace microllm::ops
