// Flash attention forward on Hopper's warpgroup MMA (wgmma), BF16, D 64 and 128, default
// positions (key j at j, query t at t + S − T), causal or full, GQA, any T ≤ S. The same
// contract as the mma.sync forward (flash_attention_forward_cuda.cu): out (B, H, T, D) and the
// log2-domain log-sum-exp (B, H, T) that the backward reads.
//
// A block is two consumer warpgroups × 64 query rows; key tiles of 128 rows stream through
// three stages of 128-byte-swizzled shared memory (cp.async, rows past S zero-filled). Per
// tile j a warpgroup issues S_j = Q · K_jᵀ (Q and K from shared memory, K-major) and then
// O += P_{j−1} · V_{j−1} (P from registers, V read MN-major: no transposed copy), waits for
// S_j alone, runs tile j's online softmax while P · V is in flight, then waits for it and
// rescales O. Layouts and descriptors: wgmma.cuh. The kernel lab's dev/cuda/flash_wgmma.cu
// held the same kernel on T = S multiples of 128 with a CPU check, and its first variant,
// until `bc3c29d` (git history).

#include "../cuda_common.cuh"
#include "attention_kernels.h"
#include "flash_attention.cuh"
#include "microllm/core/switch.h"
#include "wgmma.cuh"

namespace microllm::ops {
namespace {

using namespace cuda_detail;
using namespace wgmma;
using flash::FlashShape;
using bf16 = __nv_bfloat16;

constexpr int kGroupThreads = 128;                // a warpgroup
constexpr int kGroupRows = 64;                    // query rows of a warpgroup (wgmma M)
constexpr int kGroups = 2;                        // consumer warpgroups of a block
constexpr int kBlockRows = kGroupRows * kGroups;  // query rows of a block
constexpr int kKeys = 128;                        // keys of a tile (the S product's N)
constexpr int kThreads = kGroupThreads * kGroups;
constexpr int kStages = 3;

template <int D>
struct Layout {
  static constexpr int kQBytes = kBlockRows * D * 2;
  static constexpr int kTileBytes = kKeys * D * 2;  // one K or V tile
  static_assert(kQBytes % 1024 == 0 && kTileBytes % 1024 == 0,
                "swizzled tiles start 1,024-aligned");
  static constexpr int kBytes = kQBytes + 2 * kStages * kTileBytes + 1024;  // + alignment
};

struct Args {
  FlashShape s;
  const bf16* q;  // (B, H, T, D)
  const bf16* k;  // (B, Hkv, S, D)
  const bf16* v;  // (B, Hkv, S, D)
  bf16* out;      // (B, H, T, D)
  float* lse;     // (B, H, T), log2 domain
};

// What a thread works on, from the block and thread index: the query block (in reverse, so
// the longest causal rows go first), the heads, this thread's rows.
struct Work {
  int group, warp, g, c;
  int64_t t0;        // the block's first query
  int64_t row_t;     // this thread's first query row; the second is row_t + 8
  int64_t group_t0;  // the warpgroup's first query
  int64_t offset;    // S − T: query t sits at position t + offset
  int tiles;         // key tiles the block visits
  int64_t q_row0;    // the block's first row of q / out as (B·H·T) rows
  int64_t kv_row0;   // the head's first row of K / V as (B·Hkv·S) rows
};
__device__ __forceinline__ Work work_of(const FlashShape& s) {
  Work w;
  const int64_t blocks = (s.T + kBlockRows - 1) / kBlockRows;
  const int64_t block = blocks - 1 - blockIdx.x, h = blockIdx.y, b = blockIdx.z;
  const int t = threadIdx.x, lane = t % kWarp;
  w.group = t / kGroupThreads;
  w.warp = (t % kGroupThreads) / kWarp;
  w.g = lane / 4;
  w.c = lane % 4;
  w.t0 = block * kBlockRows;
  w.group_t0 = w.t0 + w.group * kGroupRows;
  w.row_t = w.group_t0 + 16 * w.warp + w.g;
  w.offset = s.S - s.T;
  w.tiles = static_cast<int>(s.causal ? flash::causal_key_tiles(s.T, s.S, w.t0, kBlockRows, kKeys)
                                      : (s.S + kKeys - 1) / kKeys);
  w.q_row0 = (b * s.H + h) * s.T + w.t0;
  w.kv_row0 = (b * s.Hkv + h / (s.H / s.Hkv)) * s.S;
  return w;
}

// Shared memory of a block: Q (kBlockRows, D), then kStages × (K, V) tiles of (kKeys, D).
template <int D>
struct Tiles {
  uint8_t* base;
  const bf16* k_rows;  // (S, D) of the block's KV head
  const bf16* v_rows;  // (S, D)
  int64_t S;
  __device__ Tiles(uint8_t* raw, const Args& a, const Work& w)
      : base(align_to_tiles(raw)),
        k_rows(a.k + w.kv_row0 * D),
        v_rows(a.v + w.kv_row0 * D),
        S(a.s.S) {}
  // Warpgroup `group`'s 64 query rows (in each atom).
  __device__ const uint8_t* q_group(int group) const { return base + group * kGroupRows * 128; }
  __device__ uint8_t* k(int j) const {
    return base + Layout<D>::kQBytes + (j % kStages) * 2 * Layout<D>::kTileBytes;
  }
  __device__ uint8_t* v(int j) const { return k(j) + Layout<D>::kTileBytes; }
  // Starts the copies of key tile j's K and V, rows past S as zeros (the caller commits).
  __device__ void load(int j) const {
    const int64_t first = static_cast<int64_t>(j) * kKeys;
    const int valid = static_cast<int>(S - first < kKeys ? S - first : kKeys);
    load_tile_rows<D>(k(j), k_rows + first * D, kKeys, valid, D, threadIdx.x, kThreads);
    load_tile_rows<D>(v(j), v_rows + first * D, kKeys, valid, D, threadIdx.x, kThreads);
  }
  // Q (rows past T as zeros) and key tile 0 as one cp.async group, tile 1 (if any) as the next.
  __device__ void start(const Args& a, const Work& w) const {
    const int valid = static_cast<int>(a.s.T - w.t0 < kBlockRows ? a.s.T - w.t0 : kBlockRows);
    load_tile_rows<D>(base, a.q + w.q_row0 * D, kBlockRows, valid, D, threadIdx.x, kThreads);
    load(0);
    commit_async();
    if (w.tiles > 1) load(1);
    commit_async();
  }
};

// Issues S (64, kKeys) = Q_group · K_tileᵀ as one wgmma group (committed, not waited for).
template <int D>
__device__ __forceinline__ void issue_scores(float (&s)[kKeys / 2], const uint8_t* q_group,
                                             const uint8_t* k_tile) {
  wgmma_fence();
#pragma unroll
  for (int ks = 0; ks < D / 16; ++ks) {
    const int atom = ks / 4, within = (ks % 4) * 32;
    wgmma_ss_n128<0, 0>(s, descriptor(q_group + atom * kBlockRows * 128 + within, 16, 1024),
                        descriptor(k_tile + atom * kKeys * 128 + within, 16, 1024), ks > 0);
  }
  wgmma_commit();
}

// Issues O (64, D) += P · V_tile as one wgmma group; p holds P's A fragments per 16 keys.
template <int D>
__device__ __forceinline__ void issue_values(float (&acc)[D / 2],
                                             const uint32_t (&p)[kKeys / 16][4],
                                             const uint8_t* v_tile) {
  fence_registers(acc);
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < kKeys / 16; ++kk) {
    const uint64_t vd = descriptor(v_tile + kk * 16 * 128, kKeys * 128, 1024);
    if constexpr (D == 64)
      wgmma_rs_n64<1>(acc, p[kk], vd, 1);
    else
      wgmma_rs_n128<1>(acc, p[kk], vd, 1);
  }
  wgmma_commit();
}

// The online softmax of one tile of scores, in place: masks keys past S and (causal) keys
// after each row, only in a tile that needs it; updates the running max (of the raw scores)
// and the thread's partial sums, leaves P = exp2(s · scale_log2 − max · scale_log2) in s (one
// FFMA and one exp2 an element), and returns in `alpha` the factor for what O holds so far.
// Element e of s is row g + 8·((e % 4) / 2), key 8·(e / 4) + 2c + e % 2 of the tile. Every
// row sees key 0 (default positions, T ≤ S), so the running max is finite after tile 0.
__device__ __forceinline__ void softmax_tile(float (&s)[kKeys / 2], const Work& w,
                                             const FlashShape& shape, int j, float (&row_max)[2],
                                             float (&row_sum)[2], float (&alpha)[2]) {
  const int64_t key0 = static_cast<int64_t>(j) * kKeys;
  const bool masked =
      key0 + kKeys > shape.S || (shape.causal && key0 + kKeys - 1 > w.group_t0 + w.offset);
  if (masked) {
    // Per row, the last visible key as an offset from this thread's first key of the tile
    // (32-bit: within the tile, or clamped below it).
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      int64_t last = shape.S - 1;
      if (shape.causal) last = min(last, w.row_t + 8 * r + w.offset);
      const int limit = static_cast<int>(max(last - key0 - 2 * w.c, int64_t{-1}));
#pragma unroll
      for (int e = 2 * r; e < kKeys / 2; e += 4) {
        if (8 * (e / 4) > limit) s[e] = -INFINITY;
        if (8 * (e / 4) + 1 > limit) s[e + 1] = -INFINITY;
      }
    }
  }
  float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
  for (int e = 0; e < kKeys / 2; ++e) tile_max[(e % 4) / 2] = fmaxf(tile_max[(e % 4) / 2], s[e]);
  float scaled_max[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 1));
    tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 2));
    const float next = fmaxf(row_max[r], tile_max[r]);
    alpha[r] = exp2f((row_max[r] - next) * shape.scale_log2);
    row_max[r] = next;
    row_sum[r] *= alpha[r];
    scaled_max[r] = next * shape.scale_log2;
  }
#pragma unroll
  for (int e = 0; e < kKeys / 2; ++e) {
    const int r = (e % 4) / 2;
    s[e] = exp2f(fmaf(s[e], shape.scale_log2, -scaled_max[r]));
    row_sum[r] += s[e];
  }
}

// P's accumulator elements 8kk…8kk+7 are the A fragment of keys 16kk…16kk+15, as BF16 pairs.
__device__ __forceinline__ void pack_probabilities(const float (&s)[kKeys / 2],
                                                   uint32_t (&p)[kKeys / 16][4]) {
#pragma unroll
  for (int kk = 0; kk < kKeys / 16; ++kk)
#pragma unroll
    for (int i = 0; i < 4; ++i) p[kk][i] = pack_bf16(s[8 * kk + 2 * i], s[8 * kk + 2 * i + 1]);
}

template <int N>
__device__ __forceinline__ void scale_rows(float (&acc)[N], const float (&alpha)[2]) {
#pragma unroll
  for (int e = 0; e < N; ++e) acc[e] *= alpha[(e % 4) / 2];
}

// The quad's partial sums, then O / sum (BF16) and the log2-domain log-sum-exp, rows < T.
template <int D>
__device__ __forceinline__ void write_output(float (&acc)[D / 2], float (&row_sum)[2],
                                             const float (&row_max)[2], const Work& w,
                                             const Args& a) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    row_sum[r] += __shfl_xor_sync(0xffffffffu, row_sum[r], 1);
    row_sum[r] += __shfl_xor_sync(0xffffffffu, row_sum[r], 2);
  }
  const int64_t local = w.row_t - w.t0;  // the thread's first row within the block
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if (w.row_t + 8 * r >= a.s.T) continue;
    const float inverse = 1.0f / row_sum[r];
    bf16* out_row = a.out + (w.q_row0 + local + 8 * r) * D;
#pragma unroll
    for (int e = 2 * r; e < D / 2; e += 4) {
      const int col = 8 * (e / 4) + 2 * w.c;
      *reinterpret_cast<__nv_bfloat162*>(out_row + col) =
          __floats2bfloat162_rn(acc[e] * inverse, acc[e + 1] * inverse);
    }
    if (w.c == 0) a.lse[w.q_row0 + local + 8 * r] = row_max[r] * a.s.scale_log2 + log2f(row_sum[r]);
  }
}

// Grid (⌈T / kBlockRows⌉, H, B), kThreads threads, Layout<D>::kBytes of shared memory.
template <int D>
__global__ void __launch_bounds__(kThreads, 1) flash_forward_wgmma_kernel(const Args a) {
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
  __trap();  // wgmma needs sm_90a; the launcher only comes here on such a device
#else
  extern __shared__ uint8_t shared_raw[];
  const Work w = work_of(a.s);
  const Tiles<D> tiles(shared_raw, a, w);
  tiles.start(a, w);
  const uint8_t* q_group = tiles.q_group(w.group);
  float acc[D / 2];  // O (64, D), the accumulator layout
#pragma unroll
  for (int e = 0; e < D / 2; ++e) acc[e] = 0.0f;
  float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.0f, 0.0f}, alpha[2];
  uint32_t p[kKeys / 16][4];  // the previous tile's probabilities
  for (int j = 0; j < w.tiles; ++j) {
    wait_async<1>();  // tile j is here (tile j + 1 may still be in flight)
    fence_async_shared();
    __syncthreads();
    float s[kKeys / 2];
    issue_scores<D>(s, q_group, tiles.k(j));
    if (j > 0) {
      issue_values<D>(acc, p, tiles.v(j - 1));
      wgmma_wait<1>();
    } else {
      wgmma_wait<0>();
    }
    fence_registers(s);
    softmax_tile(s, w, a.s, j, row_max, row_sum, alpha);
    wgmma_wait<0>();
    fence_registers(acc);
    scale_rows(acc, alpha);
    pack_probabilities(s, p);
    __syncthreads();  // every warpgroup is done with tile j − 1's V (and tile j's K)
    if (j + 2 < w.tiles) tiles.load(j + 2);
    commit_async();  // possibly empty: one group per tile for the wait above
  }
  issue_values<D>(acc, p, tiles.v(w.tiles - 1));
  wgmma_wait<0>();
  fence_registers(acc);
  write_output<D>(acc, row_sum, row_max, w, a);
#endif
}

template <int D>
void launch(const Args& a, cudaStream_t stream) {
  flash::allow_shared_bytes<flash_forward_wgmma_kernel<D>>(Layout<D>::kBytes);
  const dim3 grid(static_cast<unsigned>((a.s.T + kBlockRows - 1) / kBlockRows),
                  static_cast<unsigned>(a.s.H), static_cast<unsigned>(a.s.B));
  flash_forward_wgmma_kernel<D><<<grid, kThreads, Layout<D>::kBytes, stream>>>(a);
  CUDA_CHECK_LAUNCH("flash_forward_wgmma_kernel");
}

bool device_has_wgmma() {
  static const bool has = [] {
    int device = 0, major = 0, minor = 0;
    CUDA_CHECK(cudaGetDevice(&device));
    CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
    CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
    return major == 9 && minor == 0;
  }();
  return has;
}

}  // namespace

bool flash_wgmma_enabled() { return switch_on("MICROLLM_FLASH_WGMMA"); }

bool flash_wgmma_forward_enabled(int64_t D) {
  return flash_wgmma_enabled() || (D == 128 && !switch_off("MICROLLM_FLASH_WGMMA"));
}

bool flash_wgmma_forward_applies(const AttentionShape& s, const Tensor& q, const Tensor& q_pos,
                                 const Tensor& k_pos) {
  return q.dtype() == DType::BF16 && (s.D == 64 || s.D == 128) && s.scale > 0.0 &&
         !q_pos.defined() && !k_pos.defined() && s.T >= 1 && s.T <= s.S && s.H <= 65535 &&
         s.B <= 65535 && device_has_wgmma();
}

void flash_attention_forward_wgmma_cuda(const AttentionShape& shape, const Tensor& q,
                                        const Tensor& k, const Tensor& v, const Tensor& out,
                                        const Tensor& lse) {
  const Tensor none;
  MICROLLM_CHECK(flash_wgmma_forward_applies(shape, q, none, none), "attention",
                 "the wgmma flash forward takes bf16, D 64 or 128, a positive scale, 1 ≤ T ≤ S "
                 "and default positions on an sm_90 device, found q ",
                 q.describe(), ", T ", shape.T, ", S ", shape.S);
  const FlashShape s = flash::flash_shape_of(shape, none, none);
  MICROLLM_CHECK(lse.dtype() == DType::F32 && lse.numel() == s.B * s.H * s.T, "attention",
                 "flash attention saves an f32 (B, H, T) log-sum-exp, found ", lse.describe());
  const Args a{s,
               ptr<const bf16>(q),
               ptr<const bf16>(k),
               ptr<const bf16>(v),
               ptr<bf16>(out),
               ptr<float>(lse)};
  if (shape.D == 64)
    launch<64>(a, stream_of(out));
  else
    launch<128>(a, stream_of(out));
}

}  // namespace microllm::ops
