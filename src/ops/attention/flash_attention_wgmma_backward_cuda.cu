// Flash attention backward on Hopper's warpgroup MMA (wgmma): the dK/dV and dQ kernels of
// flash_attention_backward_cuda.cu for BF16, D 64 and default positions (T ≤ S), in the same
// scheme: dK/dV writes dSᵀ to the scratch and dQ is one product over it, no atomics, the GQA
// group's parts summed in order by the caller's sum kernel. The kernel lab's
// dev/cuda/flash_wgmma_backward.cu held the same kernels on T = S multiples of 128 until
// `bc3c29d` (git history).
//
// dK/dV: a block owns 128 keys (two warpgroups of 64) of one KV head and a part of its group's
// query heads; K and V stay in shared memory while 64-row query tiles (Q, dO, their lse and
// delta) stream through two stages. Per tile: Sᵀ = K · Qᵀ and dPᵀ = V · dOᵀ (both operands from
// shared memory, K-major), Pᵀ = exp2(Sᵀ − lse) masked, dSᵀ = Pᵀ ∘ (dPᵀ − delta), then
// dV += Pᵀ · dO and dK += dSᵀ · Q with Pᵀ and dSᵀ as register A operands and dO, Q read
// MN-major; dSᵀ goes to the scratch while those run.
// dQ: a block owns 128 query rows of one (b, h) and sums dS · K over 64-key tiles, dS read
// transposed (MN-major) from the scratch and K MN-major.
// The scratch's rows (keys) and columns (queries) are rounded up to 128 here: a dQ block reads
// 128 query columns, and a dK/dV block writes 128 key rows. Which entries are written: see
// `first_query_tile`.
#include "../cuda_common.cuh"
#include "attention_kernels.h"
#include "flash_attention.cuh"
#include "wgmma.cuh"

namespace microllm::ops::flash {
namespace {

using namespace cuda_detail;
using namespace wgmma;
using bf16 = __nv_bfloat16;

constexpr int D = 64;  // head dim of these kernels
constexpr int kGroupThreads = 128;
constexpr int kGroupRows = 64;  // rows of a warpgroup's products (wgmma M)
constexpr int kBlockThreads = 2 * kGroupThreads;
constexpr int kKeyBlock = 2 * kGroupRows;    // dK/dV: keys of a block
constexpr int kQueryTile = 64;               // dK/dV: query rows of a step
constexpr int kQueryBlock = 2 * kGroupRows;  // dQ: query rows of a block
constexpr int kKeyTile = 64;                 // dQ: keys of a step

// ---- dK / dV ---------------------------------------------------------------------------------

// Shared memory: K and V (kKeyBlock, D), 2 stages of Q and dO (kQueryTile, D), every tile
// 1,024-byte aligned, then 2 stages of the tile's lse and delta (kQueryTile F32 each).
constexpr int kKBytes = kKeyBlock * D * 2;
constexpr int kQBytes = kQueryTile * D * 2;
constexpr int kStageBytes = 2 * kQBytes;
constexpr int kRowStatsBytes = 2 * kQueryTile * 4;
constexpr int kDkDvShared = 2 * kKBytes + 2 * kStageBytes + 2 * kRowStatsBytes + 1024;
static_assert(kKBytes % 1024 == 0 && kQBytes % 1024 == 0, "swizzled tiles start 1,024-aligned");

// The first 64-row query tile a dK/dV block of keys from j0 on visits: causal, the tile that
// holds the first query seeing key j0, taken down to a 128-row boundary, so that every dQ block
// finds the dS of both its tiles for each key tile it reads (a dQ block reads key tile j when
// one of its rows sees it; then its first tile does not start after j's block's first query).
__device__ __forceinline__ int64_t first_query_tile(const FlashShape& s, int64_t j0) {
  if (!s.causal) return 0;
  const int64_t first_query = j0 - (s.S - s.T);
  return first_query <= 0 ? 0 : first_query / kQueryBlock * (kQueryBlock / kQueryTile);
}

// Grid (B·Hkv·parts, ⌈S / kKeyBlock⌉), kBlockThreads threads, kDkDvShared bytes.
__global__ void __launch_bounds__(kBlockThreads, 1) flash_dkdv_wgmma_kernel(BackwardArgs<bf16> a) {
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
  __trap();
#else
  extern __shared__ uint8_t shared_raw[];
  uint8_t* base = align_to_tiles(shared_raw);
  uint8_t* k_tile = base;
  uint8_t* v_tile = base + kKBytes;
  const auto q_tile = [&](int64_t n) { return base + 2 * kKBytes + (n % 2) * kStageBytes; };
  const auto do_tile = [&](int64_t n) { return q_tile(n) + kQBytes; };
  const auto lse_tile = [&](int64_t n) {
    return reinterpret_cast<float*>(base + 2 * kKBytes + 2 * kStageBytes +
                                    (n % 2) * kRowStatsBytes);
  };
  const auto delta_tile = [&](int64_t n) { return lse_tile(n) + kQueryTile; };

  const FlashShape& s = a.shape;
  const int64_t kv = blockIdx.x / a.parts;  // b·Hkv + KV head
  const int part = static_cast<int>(blockIdx.x % a.parts);
  const int64_t group = s.H / s.Hkv, heads = group / a.parts;  // heads of this block's part
  const int64_t first_bh = (kv / s.Hkv) * s.H + (kv % s.Hkv) * group + part * heads;
  const int64_t j0 = static_cast<int64_t>(blockIdx.y) * kKeyBlock;  // causal: most work first
  const int t = threadIdx.x, group_index = t / kGroupThreads;
  const int warp = (t % kGroupThreads) / 32, lane = t % 32, g = lane / 4, c = lane % 4;
  const int64_t offset = s.S - s.T;

  // Steps over (head of the part, query tile): step n is head first_bh + n / per_head, tile
  // q_begin + n % per_head.
  const int64_t q_begin = first_query_tile(s, j0);
  const int64_t q_tiles = (s.T + kQueryTile - 1) / kQueryTile;
  const int64_t per_head = q_tiles > q_begin ? q_tiles - q_begin : 0;
  const int64_t steps = heads * per_head;
  const auto q0_of = [&](int64_t n) { return (q_begin + n % per_head) * kQueryTile; };
  const auto bh_of = [&](int64_t n) { return first_bh + n / per_head; };
  const auto load_step = [&](int64_t n) {
    const int64_t bh = bh_of(n), q0 = q0_of(n), row = bh * s.T + q0;
    const int valid = static_cast<int>(s.T - q0 < kQueryTile ? s.T - q0 : kQueryTile);
    load_tile_rows<D>(q_tile(n), a.q + row * D, kQueryTile, valid, D, t, kBlockThreads);
    load_tile_rows<D>(do_tile(n), a.dout + row * D, kQueryTile, valid, D, t, kBlockThreads);
    if (t < kQueryTile) {  // rows past T: lse +∞ makes their probabilities 0
      lse_tile(n)[t] = t < valid ? a.lse[row + t] : INFINITY;
      delta_tile(n)[t] = t < valid ? a.delta[row + t] : 0.0f;
    }
  };
  const int key_valid = static_cast<int>(s.S - j0 < kKeyBlock ? s.S - j0 : kKeyBlock);
  load_tile_rows<D>(k_tile, a.k + (kv * s.S + j0) * D, kKeyBlock, key_valid, D, t, kBlockThreads);
  load_tile_rows<D>(v_tile, a.v + (kv * s.S + j0) * D, kKeyBlock, key_valid, D, t, kBlockThreads);
  if (steps > 0) load_step(0);
  commit_async();
  if (steps > 1) load_step(1);
  commit_async();

  // This thread's keys: key and key + 8; its queries in a tile: 8·(e / 4) + 2c + e % 2 for
  // accumulator element e.
  const int64_t key = j0 + group_index * kGroupRows + 16 * warp + g;
  const int64_t group_last_key = j0 + group_index * kGroupRows + kGroupRows - 1;
  const uint8_t* k_group = k_tile + group_index * kGroupRows * 128;
  const uint8_t* v_group = v_tile + group_index * kGroupRows * 128;
  float dk_acc[D / 2], dv_acc[D / 2];
#pragma unroll
  for (int e = 0; e < D / 2; ++e) dk_acc[e] = dv_acc[e] = 0.0f;

  for (int64_t n = 0; n < steps; ++n) {
    wait_async<1>();
    fence_async_shared();
    __syncthreads();
    const int64_t q0 = q0_of(n);
    float sc[kQueryTile / 2], dp[kQueryTile / 2];  // Sᵀ, dPᵀ (64 keys × kQueryTile queries)
    wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < D / 16; ++ks)
      wgmma_ss_n64<0, 0>(sc, descriptor(k_group + ks * 32, 16, 1024),
                         descriptor(q_tile(n) + ks * 32, 16, 1024), ks > 0);
    wgmma_commit();
#pragma unroll
    for (int ks = 0; ks < D / 16; ++ks)
      wgmma_ss_n64<0, 0>(dp, descriptor(v_group + ks * 32, 16, 1024),
                         descriptor(do_tile(n) + ks * 32, 16, 1024), ks > 0);
    wgmma_commit();
    wgmma_wait<1>();
    fence_registers(sc);
    const float* lse_n = lse_tile(n);
    // Keys past S (zero rows of K) and, causal, keys after a query are hidden.
    const bool masked = group_last_key >= s.S || (s.causal && group_last_key > q0 + offset);
#pragma unroll
    for (int e = 0; e < kQueryTile / 2; ++e) {
      const int query = 8 * (e / 4) + 2 * c + e % 2;
      const int64_t k_e = key + 8 * ((e % 4) / 2);
      const bool hidden = masked && (k_e >= s.S || (s.causal && k_e > q0 + query + offset));
      sc[e] = hidden ? 0.0f : exp2f(sc[e] * s.scale_log2 - lse_n[query]);
    }
    wgmma_wait<0>();
    fence_registers(dp);
    const float* delta_n = delta_tile(n);
#pragma unroll
    for (int e = 0; e < kQueryTile / 2; ++e)
      dp[e] = sc[e] * (dp[e] - delta_n[8 * (e / 4) + 2 * c + e % 2]);  // dSᵀ
    uint32_t p_frag[kQueryTile / 16][4], ds_frag[kQueryTile / 16][4];
#pragma unroll
    for (int kk = 0; kk < kQueryTile / 16; ++kk)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        p_frag[kk][i] = pack_bf16(sc[8 * kk + 2 * i], sc[8 * kk + 2 * i + 1]);
        ds_frag[kk][i] = pack_bf16(dp[8 * kk + 2 * i], dp[8 * kk + 2 * i + 1]);
      }
    // dSᵀ to the scratch: (key, query pair) as BF16 pairs, before the products that read the
    // fragments (registers of an A operand may not be read while its wgmma runs).
    bf16* ds_rows = a.ds + (bh_of(n) * a.ds_rows + key) * a.ds_pitch + q0 + 2 * c;
#pragma unroll
    for (int kk = 0; kk < kQueryTile / 16; ++kk)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int e = 8 * kk + 2 * i;
        *reinterpret_cast<uint32_t*>(ds_rows + 8 * ((e % 4) / 2) * a.ds_pitch + 8 * (e / 4)) =
            ds_frag[kk][i];
      }
    fence_registers(dv_acc);
    fence_registers(dk_acc);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kQueryTile / 16; ++kk)
      wgmma_rs_n64<1>(dv_acc, p_frag[kk], descriptor(do_tile(n) + kk * 16 * 128, 64 * 128, 1024),
                      1);
#pragma unroll
    for (int kk = 0; kk < kQueryTile / 16; ++kk)
      wgmma_rs_n64<1>(dk_acc, ds_frag[kk], descriptor(q_tile(n) + kk * 16 * 128, 64 * 128, 1024),
                      1);
    wgmma_commit();
    wgmma_wait<0>();
    fence_registers(dv_acc);
    fence_registers(dk_acc);
    __syncthreads();  // both warpgroups are done with this stage
    if (n + 2 < steps) load_step(n + 2);
    commit_async();
  }
  wait_async<0>();  // with no steps, K and V were loaded and never waited for
  // This part's unscaled F32 sums (the caller's sum kernel scales and rounds their total), or
  // with one part dK (scaled) and dV in BF16; rows past S are not stored.
  const int64_t part_row0 = a.parts > 1 ? (part * s.B * s.Hkv + kv) * s.S : kv * s.S;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int64_t k_r = key + 8 * r;
    if (k_r >= s.S) continue;
    const int64_t row = part_row0 + k_r;
#pragma unroll
    for (int e = 2 * r; e < D / 2; e += 4) {
      const int col = 8 * (e / 4) + 2 * c;
      if (a.parts > 1) {
        *reinterpret_cast<float2*>(a.dk_parts + row * D + col) =
            make_float2(dk_acc[e], dk_acc[e + 1]);
        *reinterpret_cast<float2*>(a.dv_parts + row * D + col) =
            make_float2(dv_acc[e], dv_acc[e + 1]);
      } else {
        *reinterpret_cast<__nv_bfloat162*>(a.dk + row * D + col) =
            __floats2bfloat162_rn(dk_acc[e] * s.scale, dk_acc[e + 1] * s.scale);
        *reinterpret_cast<__nv_bfloat162*>(a.dv + row * D + col) =
            __floats2bfloat162_rn(dv_acc[e], dv_acc[e + 1]);
      }
    }
  }
#endif
}

// ---- dQ ------------------------------------------------------------------------------------

// Shared memory: 2 stages of a dSᵀ tile (kKeyTile keys, kQueryBlock queries) and a K tile
// (kKeyTile, D).
constexpr int kDsBytes = kKeyTile * kQueryBlock * 2;
constexpr int kKTileBytes = kKeyTile * D * 2;
constexpr int kDqShared = 2 * (kDsBytes + kKTileBytes) + 1024;
static_assert(kDsBytes % 1024 == 0 && kKTileBytes % 1024 == 0,
              "swizzled tiles start 1,024-aligned");

// Grid (⌈T / kQueryBlock⌉, B·H), kBlockThreads threads, kDqShared bytes.
__global__ void __launch_bounds__(kBlockThreads, 1) flash_dq_wgmma_kernel(BackwardArgs<bf16> a) {
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
  __trap();
#else
  extern __shared__ uint8_t shared_raw[];
  uint8_t* base = align_to_tiles(shared_raw);
  const auto ds_tile = [&](int64_t j) { return base + (j % 2) * (kDsBytes + kKTileBytes); };
  const auto k_tile = [&](int64_t j) { return ds_tile(j) + kDsBytes; };
  const FlashShape& s = a.shape;
  const int64_t blocks = (s.T + kQueryBlock - 1) / kQueryBlock;
  const int64_t t0 = (blocks - 1 - blockIdx.x) * kQueryBlock;  // causal: most work first
  const int64_t bh = blockIdx.y, kv = bh / s.H * s.Hkv + bh % s.H / (s.H / s.Hkv);
  const int t = threadIdx.x, group_index = t / kGroupThreads;
  const int warp = (t % kGroupThreads) / 32, lane = t % 32, g = lane / 4, c = lane % 4;
  const bf16* ds_head = a.ds + bh * a.ds_rows * a.ds_pitch;  // (ds_rows, ds_pitch)
  const bf16* k_head = a.k + kv * s.S * D;                   // (S, D)
  const int64_t tiles = s.causal ? causal_key_tiles(s.T, s.S, t0, kQueryBlock, kKeyTile)
                                 : (s.S + kKeyTile - 1) / kKeyTile;
  const auto load = [&](int64_t j) {
    // dSᵀ rows j·kKeyTile…, the block's kQueryBlock queries (two 64-column atoms); K rows
    // past S as zeros (their dS is 0 in the scratch).
    load_tile<kQueryBlock>(ds_tile(j), ds_head + j * kKeyTile * a.ds_pitch + t0, kKeyTile,
                           a.ds_pitch, t, kBlockThreads);
    const int valid =
        static_cast<int>(s.S - j * kKeyTile < kKeyTile ? s.S - j * kKeyTile : kKeyTile);
    load_tile_rows<D>(k_tile(j), k_head + j * kKeyTile * D, kKeyTile, valid, D, t, kBlockThreads);
  };
  load(0);
  commit_async();
  if (tiles > 1) load(1);
  commit_async();
  float acc[D / 2];
#pragma unroll
  for (int e = 0; e < D / 2; ++e) acc[e] = 0.0f;
  for (int64_t j = 0; j < tiles; ++j) {
    wait_async<1>();
    fence_async_shared();
    __syncthreads();
    // A = dS (queries × keys), stored keys × queries: MN-major; the warpgroup's 64 queries
    // are atom `group_index` of the tile. B = K (keys × D), stored along D: MN-major.
    fence_registers(acc);
    wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < kKeyTile / 16; ++ks)
      wgmma_ss_n64<1, 1>(acc,
                         descriptor(ds_tile(j) + group_index * kKeyTile * 128 + ks * 16 * 128,
                                    kKeyTile * 128, 1024),
                         descriptor(k_tile(j) + ks * 16 * 128, kKeyTile * 128, 1024), 1);
    wgmma_commit();
    wgmma_wait<0>();
    fence_registers(acc);
    __syncthreads();
    if (j + 2 < tiles) load(j + 2);
    commit_async();
  }
  // Rows past T are not stored (their dS columns may never have been written).
  const int64_t row_t = t0 + group_index * kGroupRows + 16 * warp + g;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if (row_t + 8 * r >= s.T) continue;
    bf16* dq_row = a.dq + (bh * s.T + row_t + 8 * r) * D;
#pragma unroll
    for (int e = 2 * r; e < D / 2; e += 4) {
      const int col = 8 * (e / 4) + 2 * c;
      *reinterpret_cast<__nv_bfloat162*>(dq_row + col) =
          __floats2bfloat162_rn(acc[e] * s.scale, acc[e + 1] * s.scale);
    }
  }
#endif
}

}  // namespace

int64_t wgmma_scratch_rows(int64_t n) { return (n + kKeyBlock - 1) / kKeyBlock * kKeyBlock; }

int wgmma_dkdv_parts(const FlashShape& s) {
  constexpr int64_t kEnoughBlocks = 512;  // ~4 per SM of a 132-SM H200 at 1 resident
  const int64_t group = s.H / s.Hkv;
  const int64_t blocks = s.B * s.Hkv * ((s.S + kKeyBlock - 1) / kKeyBlock);
  for (int64_t p = 1; p < group; ++p)
    if (group % p == 0 && blocks * p >= kEnoughBlocks) return static_cast<int>(p);
  return static_cast<int>(group);
}

void launch_dkdv_wgmma(const BackwardArgs<bf16>& a, cudaStream_t stream) {
  allow_shared_bytes<flash_dkdv_wgmma_kernel>(kDkDvShared);
  const dim3 grid(static_cast<unsigned>(a.shape.B * a.shape.Hkv * a.parts),
                  static_cast<unsigned>((a.shape.S + kKeyBlock - 1) / kKeyBlock));
  flash_dkdv_wgmma_kernel<<<grid, kBlockThreads, kDkDvShared, stream>>>(a);
  CUDA_CHECK_LAUNCH("flash_dkdv_wgmma_kernel");
}

void launch_dq_wgmma(const BackwardArgs<bf16>& a, cudaStream_t stream) {
  allow_shared_bytes<flash_dq_wgmma_kernel>(kDqShared);
  const dim3 grid(static_cast<unsigned>((a.shape.T + kQueryBlock - 1) / kQueryBlock),
                  static_cast<unsigned>(a.shape.B * a.shape.H));
  flash_dq_wgmma_kernel<<<grid, kBlockThreads, kDqShared, stream>>>(a);
  CUDA_CHECK_LAUNCH("flash_dq_wgmma_kernel");
}

}  // namespace microllm::ops::flash
