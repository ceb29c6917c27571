// flash_wgmma: causal flash attention forward, BF16, on Hopper's warpgroup MMA (wgmma) —
// the step after the mma.sync kernels of src/ops/attention (0.63× SDPA forward at B8 H14 KV2
// T1024 D64, docs/optimization-log.md). Layout: q, o (B, H, T, D), k, v (B, KV, T, D) dense
// row-major, GQA (H a multiple of KV), S = T; o BF16, lse (B, H, T) F32 in natural log
// units. The CPU reference (F64) is attention_cpu below.
//
//   unit       two single products through one warpgroup, against the host: C = A · Bᵀ with
//              A and B in shared memory (K-major, 128-byte swizzle: the S = Q · Kᵀ form), and
//              C = A · V with A in registers and V in shared memory stored along N
//              (MN-major: the O += P · V form). Checks the descriptors and fragment layouts
//              before the kernel that depends on them.
//   variant 1  two consumer warpgroups × 64 query rows per block, key tiles of 128 rows,
//              cp.async loads double-buffered by all 256 threads into 128-byte-swizzled
//              tiles; per tile S = Q · Kᵀ (wgmma m64n128k16, Q and K from shared memory),
//              the online softmax in registers, P converted in registers to the A fragment
//              and O += P · V (wgmma m64nDk16, V from shared memory, transposed); every
//              wgmma group waited for before its result is used (no overlap between the
//              two products and the softmax yet).
//   variant 2  variant 1 with three stages of K and V and tile j's S = Q · K_jᵀ issued with
//              tile j - 1's O += P · V, so tile j's softmax runs while P · V is in flight.
//
// Tiles, descriptors and fragment layouts: wgmma.h.
//
// Build: make -C dev/cuda    Run: ./build/flash_wgmma [unit|check|bench|all] [variant 1|2]
#include <cmath>
#include <cstring>
#include <string>
#include <utility>

#include "common.h"
#include "wgmma.h"

namespace {

using namespace lab;
using bf16 = __nv_bfloat16;
constexpr int kWarp = 32;
constexpr int kGroupThreads = 128;                // a warpgroup
constexpr int kGroupRows = 64;                    // query rows of a warpgroup (wgmma M)
constexpr int kGroups = 2;                        // consumer warpgroups of a block
constexpr int kBlockRows = kGroupRows * kGroups;  // query rows of a block
constexpr int kKeys = 128;                        // keys of a tile (the S product's N)
constexpr int kThreads = kGroupThreads * kGroups;
// o's tolerance: BF16's, with twice its rtol and relative L2, for the second rounding every
// flash kernel makes (P rounded to BF16 before P · V, as SDPA's kernels also do).
constexpr lab::Tolerance kToleranceO{"bf16 with P in bf16", 1e-3, 1.0 / 64, 1.0 / 128};

// ---- CPU reference -----------------------------------------------------------------------

// o (B, H, T, D) and lse (B, H, T) in F64, causal, from the BF16 inputs widened exactly.
void attention_cpu(const std::vector<float>& q, const std::vector<float>& k,
                   const std::vector<float>& v, std::vector<double>& o, std::vector<double>& lse,
                   int B, int H, int KV, int T, int D) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  std::vector<double> p(T);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h) {
      const int kvh = h / (H / KV);
      const float* kb = k.data() + (static_cast<int64_t>(b) * KV + kvh) * T * D;  // (T, D)
      const float* vb = v.data() + (static_cast<int64_t>(b) * KV + kvh) * T * D;  // (T, D)
      for (int t = 0; t < T; ++t) {
        const int64_t row = (static_cast<int64_t>(b) * H + h) * T + t;
        const float* qr = q.data() + row * D;  // (D)
        double mx = -INFINITY;
        for (int s = 0; s <= t; ++s) {
          double dot = 0.0;
          for (int d = 0; d < D; ++d) dot += static_cast<double>(qr[d]) * kb[s * D + d];
          p[s] = dot * scale;
          mx = std::max(mx, p[s]);
        }
        double sum = 0.0;
        for (int s = 0; s <= t; ++s) sum += (p[s] = std::exp(p[s] - mx));
        for (int d = 0; d < D; ++d) {
          double acc = 0.0;
          for (int s = 0; s <= t; ++s) acc += p[s] * vb[s * D + d];
          o[row * D + d] = acc / sum;
        }
        lse[row] = mx + std::log(sum);
      }
    }
}

// ---- unit: the two product forms on one 64 × 64 × 64 case ------------------------------------

// c1 (64, 64) = a (64, 64) · bᵀ, b (64, 64) row-major (N, K); c2 (64, 64) = a · v, v (64, 64)
// row-major (K, N). F32 out, row-major. The descriptors' byte offsets are arguments, so that a
// failing case can be retried with them exchanged (which one the hardware reads for what).
__global__ void __launch_bounds__(kGroupThreads)
    unit_kernel(const bf16* a, const bf16* b, const bf16* v, float* c1, float* c2,
                uint32_t k_leading, uint32_t k_stride, uint32_t mn_leading, uint32_t mn_stride) {
  __shared__ __align__(1024) uint8_t a_tile[64 * 128], b_tile[64 * 128], v_tile[64 * 128];
  const int t = threadIdx.x, warp = t / kWarp, lane = t % kWarp, g = lane / 4, c = lane % 4;
  load_tile<64>(a_tile, a, 64, 64, t, kGroupThreads);
  load_tile<64>(b_tile, b, 64, 64, t, kGroupThreads);
  load_tile<64>(v_tile, v, 64, 64, t, kGroupThreads);
  cp_async_commit();
  cp_async_wait<0>();
  fence_async_shared();
  __syncthreads();
  float d[32];
  wgmma_fence();
#pragma unroll
  for (int ks = 0; ks < 4; ++ks)
    wgmma_ss_n64<0, 0>(d, descriptor(a_tile + ks * 32, k_leading, k_stride),
                       descriptor(b_tile + ks * 32, k_leading, k_stride), ks > 0);
  wgmma_commit();
  wgmma_wait<0>();
  fence_registers(d);
  // Accumulator element e: row 16·warp + g + 8·((e % 4) / 2), column 8·(e / 4) + 2c + e % 2.
  for (int e = 0; e < 32; ++e)
    c1[(16 * warp + g + 8 * ((e % 4) / 2)) * 64 + 8 * (e / 4) + 2 * c + e % 2] = d[e];
  float d2[32];
  wgmma_fence();
#pragma unroll
  for (int ks = 0; ks < 4; ++ks) {
    // The A fragment of rows 16·warp + g (+8), columns 16·ks + 2c (+1) (+8).
    auto at = [&](int row, int col) {
      return __bfloat162float(a[(16 * warp + row) * 64 + 16 * ks + col]);
    };
    const uint32_t frag[4] = {pack_bf16(at(g, 2 * c), at(g, 2 * c + 1)),
                              pack_bf16(at(g + 8, 2 * c), at(g + 8, 2 * c + 1)),
                              pack_bf16(at(g, 2 * c + 8), at(g, 2 * c + 9)),
                              pack_bf16(at(g + 8, 2 * c + 8), at(g + 8, 2 * c + 9))};
    wgmma_rs_n64<1>(d2, frag, descriptor(v_tile + ks * 16 * 128, mn_leading, mn_stride), ks > 0);
  }
  wgmma_commit();
  wgmma_wait<0>();
  fence_registers(d2);
  for (int e = 0; e < 32; ++e)
    c2[(16 * warp + g + 8 * ((e % 4) / 2)) * 64 + 8 * (e / 4) + 2 * c + e % 2] = d2[e];
}

// ---- the forward's pieces ----------------------------------------------------------------------

template <int D>
struct Layout {
  static constexpr int kQBytes = kBlockRows * D * 2;
  static constexpr int kTileBytes = kKeys * D * 2;  // one K or V tile
  static_assert(kQBytes % 1024 == 0 && kTileBytes % 1024 == 0,
                "swizzled tiles start 1,024-aligned");
  template <int kStages>
  static constexpr int bytes() {
    return kQBytes + 2 * kStages * kTileBytes + 1024;  // + alignment to 1,024
  }
};

// What a block works on, from its index: the query block (in reverse, so the longest causal
// rows go first), the head, the KV head, this thread's rows.
struct Work {
  int block, h, kvh, group, warp, g, c;
  int row_pos;      // this thread's first query row (position); the second is row_pos + 8
  int tiles;        // key tiles: causal, up to the block's last row
  int64_t q_row0;   // the block's first row of q / o as (B·H·T) rows
  int64_t kv_row0;  // the first row of K / V as (B·KV·T) rows
};
__device__ __forceinline__ Work work_of(int H, int KV, int T) {
  Work w;
  w.block = T / kBlockRows - 1 - static_cast<int>(blockIdx.x);
  w.h = blockIdx.y;
  w.kvh = w.h / (H / KV);
  const int t = threadIdx.x, lane = t % kWarp;
  w.group = t / kGroupThreads;
  w.warp = (t % kGroupThreads) / kWarp;
  w.g = lane / 4;
  w.c = lane % 4;
  w.row_pos = w.block * kBlockRows + w.group * kGroupRows + 16 * w.warp + w.g;
  w.tiles = ((w.block + 1) * kBlockRows + kKeys - 1) / kKeys;
  w.q_row0 = (static_cast<int64_t>(blockIdx.z) * H + w.h) * T + w.block * kBlockRows;
  w.kv_row0 = (static_cast<int64_t>(blockIdx.z) * KV + w.kvh) * T;
  return w;
}

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

// The online softmax of one tile of scores, in place: masks keys past each row (only in a
// tile that reaches past a row of the group), moves to log2 units, updates the running max
// and the thread's partial sums, and returns in `alpha` the factor for what O holds so far.
// Element e of s is row g + 8·((e % 4) / 2), key 8·(e / 4) + 2c + e % 2 of the tile.
__device__ __forceinline__ void softmax_tile(float (&s)[kKeys / 2], const Work& w, int j,
                                             float scale_log2, float (&row_max)[2],
                                             float (&row_sum)[2], float (&alpha)[2]) {
  const int key0 = j * kKeys;
  const bool masked = key0 + kKeys - 1 > w.block * kBlockRows + w.group * kGroupRows;
  float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
  for (int e = 0; e < kKeys / 2; ++e) {
    const int r = (e % 4) / 2, key = key0 + 8 * (e / 4) + 2 * w.c + e % 2;
    s[e] = masked && key > w.row_pos + 8 * r ? -INFINITY : s[e] * scale_log2;
    tile_max[r] = fmaxf(tile_max[r], s[e]);
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 1));
    tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 2));
    const float next = fmaxf(row_max[r], tile_max[r]);  // finite: key0 ≤ every row here
    alpha[r] = exp2f(row_max[r] - next);
    row_max[r] = next;
    row_sum[r] *= alpha[r];
  }
#pragma unroll
  for (int e = 0; e < kKeys / 2; ++e) {
    const int r = (e % 4) / 2;
    s[e] = exp2f(s[e] - row_max[r]);
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

// The quad's partial sums, then O / sum (BF16) and the log-sum-exp (natural log).
template <int D>
__device__ __forceinline__ void write_output(float (&acc)[D / 2], float (&row_sum)[2],
                                             const float (&row_max)[2], const Work& w, bf16* o,
                                             float* lse) {
  float inv[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    row_sum[r] += __shfl_xor_sync(0xffffffffu, row_sum[r], 1);
    row_sum[r] += __shfl_xor_sync(0xffffffffu, row_sum[r], 2);
    inv[r] = 1.0f / row_sum[r];
  }
  const int64_t out_row = w.q_row0 + w.group * kGroupRows + 16 * w.warp + w.g;
#pragma unroll
  for (int e = 0; e < D / 2; e += 2) {
    const int r = (e % 4) / 2, col = 8 * (e / 4) + 2 * w.c;
    *reinterpret_cast<__nv_bfloat162*>(o + (out_row + 8 * r) * D + col) =
        __floats2bfloat162_rn(acc[e] * inv[r], acc[e + 1] * inv[r]);
  }
  if (w.c == 0) {
#pragma unroll
    for (int r = 0; r < 2; ++r)
      lse[out_row + 8 * r] = (row_max[r] + log2f(row_sum[r])) * 0.69314718055994531f;
  }
}

// Shared memory of a block: Q (kBlockRows, D), then kStages × (K, V) tiles of (kKeys, D), and
// where the block's K and V rows come from.
template <int D, int kStages>
struct Tiles {
  uint8_t* base;
  const bf16* k_rows;  // (T, D) of the block's KV head
  const bf16* v_rows;  // (T, D)
  __device__ Tiles(uint8_t* raw, const bf16* k, const bf16* v, const Work& w)
      : base(align_to_tiles(raw)), k_rows(k + w.kv_row0 * D), v_rows(v + w.kv_row0 * D) {}
  __device__ uint8_t* q() const { return base; }
  // Warpgroup `group`'s 64 query rows (in each atom).
  __device__ const uint8_t* q_group(int group) const { return base + group * kGroupRows * 128; }
  __device__ uint8_t* k(int j) const {
    return base + Layout<D>::kQBytes + (j % kStages) * 2 * Layout<D>::kTileBytes;
  }
  __device__ uint8_t* v(int j) const { return k(j) + Layout<D>::kTileBytes; }
  // Starts the copies of key tile j's K and V (a cp.async group is committed by the caller).
  __device__ void load(int j) const {
    const int64_t at = static_cast<int64_t>(j) * kKeys * D;
    load_tile<D>(k(j), k_rows + at, kKeys, D, threadIdx.x, kThreads);
    load_tile<D>(v(j), v_rows + at, kKeys, D, threadIdx.x, kThreads);
  }
  // Q and key tile 0 as one cp.async group, key tile 1 (if any) as the next.
  __device__ void start(const bf16* q, const Work& w) const {
    load_tile<D>(this->q(), q + w.q_row0 * D, kBlockRows, D, threadIdx.x, kThreads);
    load(0);
    cp_async_commit();
    if (w.tiles > 1) load(1);
    cp_async_commit();
  }
};

// ---- variant 1: each product waited for ---------------------------------------------------------

// Grid (T / kBlockRows, H, B), kThreads threads, Layout<D>::bytes<2>() of shared memory.
template <int D>
__global__ void __launch_bounds__(kThreads, 1)
    flash_forward_v1(const bf16* __restrict__ q, const bf16* __restrict__ k,
                     const bf16* __restrict__ v, bf16* __restrict__ o, float* __restrict__ lse,
                     int H, int KV, int T, float scale_log2) {
  extern __shared__ uint8_t shared_raw[];
  const Work w = work_of(H, KV, T);
  const Tiles<D, 2> tiles(shared_raw, k, v, w);
  tiles.start(q, w);
  const uint8_t* q_group = tiles.q_group(w.group);
  float acc[D / 2];  // O (64, D), the accumulator layout of s
#pragma unroll
  for (int e = 0; e < D / 2; ++e) acc[e] = 0.0f;
  float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.0f, 0.0f}, alpha[2];
  for (int j = 0; j < w.tiles; ++j) {
    cp_async_wait<1>();
    fence_async_shared();
    __syncthreads();
    float s[kKeys / 2];
    issue_scores<D>(s, q_group, tiles.k(j));
    wgmma_wait<0>();
    fence_registers(s);
    softmax_tile(s, w, j, scale_log2, row_max, row_sum, alpha);
    scale_rows(acc, alpha);
    uint32_t p[kKeys / 16][4];  // packed before the first product reads it
    pack_probabilities(s, p);
    issue_values<D>(acc, p, tiles.v(j));
    wgmma_wait<0>();
    fence_registers(acc);
    __syncthreads();  // every warpgroup is done with this stage's K and V
    if (j + 2 < w.tiles) tiles.load(j + 2);
    cp_async_commit();  // possibly empty: one group per tile for the wait above
  }
  write_output<D>(acc, row_sum, row_max, w, o, lse);
}

// ---- variant 2: the next tile's scores while this tile's P · V runs -----------------------------

// As variant 1 with three stages: in iteration j the group issues S_j = Q · K_jᵀ and then
// O += P_{j-1} · V_{j-1}, waits for S_j alone (groups complete in order), runs tile j's
// softmax while the P · V product is in flight, then waits for it and rescales O. Tile j + 2
// is loaded once tile j - 1's V is no longer read. Layout<D>::bytes<3>() of shared memory.
template <int D>
__global__ void __launch_bounds__(kThreads, 1)
    flash_forward_v2(const bf16* __restrict__ q, const bf16* __restrict__ k,
                     const bf16* __restrict__ v, bf16* __restrict__ o, float* __restrict__ lse,
                     int H, int KV, int T, float scale_log2) {
  extern __shared__ uint8_t shared_raw[];
  const Work w = work_of(H, KV, T);
  const Tiles<D, 3> tiles(shared_raw, k, v, w);
  tiles.start(q, w);
  const uint8_t* q_group = tiles.q_group(w.group);
  float acc[D / 2];
#pragma unroll
  for (int e = 0; e < D / 2; ++e) acc[e] = 0.0f;
  float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.0f, 0.0f}, alpha[2];
  uint32_t p[kKeys / 16][4];  // the previous tile's probabilities
  for (int j = 0; j < w.tiles; ++j) {
    cp_async_wait<1>();  // tile j is here (tile j + 1 may still be in flight)
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
    softmax_tile(s, w, j, scale_log2, row_max, row_sum, alpha);
    wgmma_wait<0>();
    fence_registers(acc);
    scale_rows(acc, alpha);
    pack_probabilities(s, p);
    __syncthreads();  // every warpgroup is done with tile j - 1's V (and tile j's K)
    if (j + 2 < w.tiles) tiles.load(j + 2);
    cp_async_commit();
  }
  issue_values<D>(acc, p, tiles.v(w.tiles - 1));
  wgmma_wait<0>();
  fence_registers(acc);
  write_output<D>(acc, row_sum, row_max, w, o, lse);
}

// ---- host ----------------------------------------------------------------------------------

struct Shape {
  const char* name;
  int B, H, KV, T, D;
};

template <int D, int kVariant>
void launch_variant(const bf16* q, const bf16* k, const bf16* v, bf16* o, float* lse,
                    const Shape& s) {
  constexpr auto kernel = kVariant == 1 ? flash_forward_v1<D> : flash_forward_v2<D>;
  constexpr int kBytes = Layout<D>::template bytes < kVariant == 1 ? 2 : 3 > ();
  static bool configured = false;
  if (!configured) {
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kBytes));
    configured = true;
  }
  const float scale_log2 = 1.4426950408889634f / std::sqrt(static_cast<float>(D));
  kernel<<<dim3(s.T / kBlockRows, s.H, s.B), kThreads, kBytes>>>(q, k, v, o, lse, s.H, s.KV, s.T,
                                                                 scale_log2);
}

void launch(int variant, const bf16* q, const bf16* k, const bf16* v, bf16* o, float* lse,
            const Shape& s) {
  if (s.D == 64)
    variant == 1 ? launch_variant<64, 1>(q, k, v, o, lse, s)
                 : launch_variant<64, 2>(q, k, v, o, lse, s);
  else
    variant == 1 ? launch_variant<128, 1>(q, k, v, o, lse, s)
                 : launch_variant<128, 2>(q, k, v, o, lse, s);
}

bool run_unit() {
  const auto a = lab::random_bf16(64 * 64, 11), b = lab::random_bf16(64 * 64, 12),
             v = lab::random_bf16(64 * 64, 13);
  const auto af = lab::to_float(a), bf = lab::to_float(b), vf = lab::to_float(v);
  std::vector<double> ref1(64 * 64), ref2(64 * 64);
  for (int i = 0; i < 64; ++i)
    for (int j = 0; j < 64; ++j) {
      double s1 = 0.0, s2 = 0.0;
      for (int x = 0; x < 64; ++x) {
        s1 += static_cast<double>(af[i * 64 + x]) * bf[j * 64 + x];
        s2 += static_cast<double>(af[i * 64 + x]) * vf[x * 64 + j];
      }
      ref1[i * 64 + j] = s1;
      ref2[i * 64 + j] = s2;
    }
  bf16 *da, *db, *dv;
  float *dc1, *dc2;
  CUDA_CHECK(cudaMalloc(&da, 64 * 64 * 2));
  CUDA_CHECK(cudaMalloc(&db, 64 * 64 * 2));
  CUDA_CHECK(cudaMalloc(&dv, 64 * 64 * 2));
  CUDA_CHECK(cudaMalloc(&dc1, 64 * 64 * 4));
  CUDA_CHECK(cudaMalloc(&dc2, 64 * 64 * 4));
  CUDA_CHECK(cudaMemcpy(da, a.data(), 64 * 64 * 2, cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpy(db, b.data(), 64 * 64 * 2, cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpy(dv, v.data(), 64 * 64 * 2, cudaMemcpyHostToDevice));
  // The documented offsets first (wgmma.h); with them exchanged only if those fail.
  auto run = [&](uint32_t kl, uint32_t ks, uint32_t ml, uint32_t ms) {
    lab::poison_nan(dc1, 64 * 64 * 4);
    lab::poison_nan(dc2, 64 * 64 * 4);
    unit_kernel<<<1, kGroupThreads>>>(da, db, dv, dc1, dc2, kl, ks, ml, ms);
    CUDA_CHECK(cudaGetLastError());
    CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<float> c1(64 * 64), c2(64 * 64);
    CUDA_CHECK(cudaMemcpy(c1.data(), dc1, 64 * 64 * 4, cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(c2.data(), dc2, 64 * 64 * 4, cudaMemcpyDeviceToHost));
    const auto r1 = lab::compare("A·Bᵀ", c1.data(), ref1.data(), 64 * 64, lab::kToleranceF32);
    const auto r2 = lab::compare("A·V", c2.data(), ref2.data(), 64 * 64, lab::kToleranceF32);
    std::printf("unit  A·Bᵀ ss k-major  (leading %u, stride %u)  rel L2 %.3g %s\n", kl, ks,
                r1.rel_l2, r1.ok ? "ok" : "FAIL");
    std::printf("unit  A·V  rs mn-major (leading %u, stride %u)  rel L2 %.3g %s\n", ml, ms,
                r2.rel_l2, r2.ok ? "ok" : "FAIL");
    return std::make_pair(r1.ok, r2.ok);
  };
  const auto [k_ok, mn_ok] = run(16, 1024, 64 * 128, 1024);
  if (!k_ok || !mn_ok) run(1024, 16, 1024, 64 * 128);  // diagnostic only
  const bool ok = k_ok && mn_ok;
  for (void* p : {static_cast<void*>(da), static_cast<void*>(db), static_cast<void*>(dv),
                  static_cast<void*>(dc1), static_cast<void*>(dc2)})
    CUDA_CHECK(cudaFree(p));
  return ok;
}

// Runs one shape: checks against the CPU when `check`, else times it.
bool run_shape(int variant, const Shape& s, bool check) {
  const int64_t nq = static_cast<int64_t>(s.B) * s.H * s.T * s.D,
                nk = static_cast<int64_t>(s.B) * s.KV * s.T * s.D,
                rows = static_cast<int64_t>(s.B) * s.H * s.T;
  const auto q = lab::random_bf16(nq, 21), k = lab::random_bf16(nk, 22),
             v = lab::random_bf16(nk, 23);
  bf16 *dq, *dk, *dv, *dout;
  float* dlse;
  CUDA_CHECK(cudaMalloc(&dq, nq * 2));
  CUDA_CHECK(cudaMalloc(&dk, nk * 2));
  CUDA_CHECK(cudaMalloc(&dv, nk * 2));
  CUDA_CHECK(cudaMalloc(&dout, nq * 2));
  CUDA_CHECK(cudaMalloc(&dlse, rows * 4));
  CUDA_CHECK(cudaMemcpy(dq, q.data(), nq * 2, cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpy(dk, k.data(), nk * 2, cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpy(dv, v.data(), nk * 2, cudaMemcpyHostToDevice));
  lab::poison_nan(dout, nq * 2);
  lab::poison_nan(dlse, rows * 4);
  bool ok = true;
  if (check) {
    launch(variant, dq, dk, dv, dout, dlse, s);
    CUDA_CHECK(cudaGetLastError());
    CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<bf16> out(nq);
    std::vector<float> lse(rows);
    CUDA_CHECK(cudaMemcpy(out.data(), dout, nq * 2, cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(lse.data(), dlse, rows * 4, cudaMemcpyDeviceToHost));
    std::vector<double> ref_o(nq), ref_lse(rows);
    attention_cpu(lab::to_float(q), lab::to_float(k), lab::to_float(v), ref_o, ref_lse, s.B, s.H,
                  s.KV, s.T, s.D);
    const auto of = lab::to_float(out);
    const auto co = lab::compare("o", of.data(), ref_o.data(), nq, kToleranceO);
    const auto cl = lab::compare("lse", lse.data(), ref_lse.data(), rows, lab::kToleranceF16);
    ok = co.ok && cl.ok;
    std::printf("check %-28s v%d  o: max |err| %.3g rel L2 %.3g  lse: max |err| %.3g  %s\n", s.name,
                variant, co.max_abs, co.rel_l2, cl.max_abs, ok ? "ok" : "FAIL");
  } else {
    const double us =
        lab::median_launch_us([&](int) { launch(variant, dq, dk, dv, dout, dlse, s); }, 5, 5, 20);
    const double flops = 4.0 * s.B * s.H * static_cast<double>(s.T) * s.T * s.D / 2.0;
    const double bytes = 2.0 * (2 * nq + 2 * nk) + 4.0 * rows;
    std::printf("bench %-28s v%d ", s.name, variant);
    lab::print_napkin(lab::napkin(us, bytes, flops));
    std::printf("\n");
  }
  for (void* p : {static_cast<void*>(dq), static_cast<void*>(dk), static_cast<void*>(dv),
                  static_cast<void*>(dout), static_cast<void*>(dlse)})
    CUDA_CHECK(cudaFree(p));
  return ok;
}

[[noreturn]] void usage(const char* argv0) {
  std::fprintf(stderr, "usage: %s [unit|check|bench|all] [variant 1|2]\n", argv0);
  std::exit(2);
}

}  // namespace

int main(int argc, char** argv) {
  const char* program = "flash_wgmma";
  const std::string mode = argc >= 2 ? argv[1] : "all";
  if (argc > 3 || (mode != "unit" && mode != "check" && mode != "bench" && mode != "all"))
    usage(argv[0]);
  std::vector<int> variants = {1, 2};
  if (argc == 3) variants = {std::atoi(argv[2])};
  if (variants[0] != 1 && variants[0] != 2) usage(argv[0]);
  lab::require_device(program);
  lab::require_kernel_image(program, unit_kernel);
  bool ok = true;
  if (mode == "unit" || mode == "all") ok = run_unit() && ok;
  // Small shapes against the CPU: GQA groups of 2 and 1, several query blocks, D 64 and 128.
  const Shape checks[] = {{"B1 H4 KV2 T384 D64", 1, 4, 2, 384, 64},
                          {"B2 H2 KV1 T256 D128", 2, 2, 1, 256, 128}};
  if (mode == "check" || mode == "all")
    for (const int variant : variants)
      for (const Shape& s : checks) ok = run_shape(variant, s, true) && ok;
  // The issue's training shapes (docs/optimization-log.md has SDPA's figures at them).
  const Shape benches[] = {{"B8 H14 KV2 T1024 D64", 8, 14, 2, 1024, 64},
                           {"B4 H16 KV8 T2048 D128", 4, 16, 8, 2048, 128}};
  if ((mode == "bench" || mode == "all") && ok)
    for (const Shape& s : benches)
      for (const int variant : variants) run_shape(variant, s, false);
  std::printf(ok ? "all checks passed\n" : "CHECK FAILED\n");
  return ok ? 0 : 1;
}
