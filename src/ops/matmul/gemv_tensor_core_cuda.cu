// The decode GEMV on tensor cores, BF16/F16, M ≤ 16 rows of x (see gemv_cuda.cu for the
// contract and gemv_fusion.cuh for the fusions), on Hopper's mma.sync m16n8k16: x's rows
// are the 16-row A operand and W's rows — the operand that is streamed — the 8 columns of
// B, so a warp owns a tile of 8 output rows (as many warps as an 8-row kernel would have
// for the small matrices of a layer) and the A tile is mostly empty at M = 1, which costs
// nothing in a bandwidth-bound kernel:
//   - with swiglu and rope a tile is 8 pairs of rows (16 weight rows); the warp walks its
//     K slice in chunks of 4 16-byte groups per row: lane (g = lane / 4, c = lane % 4)
//     loads group 4u + c of row g of chunk u straight from DRAM into registers, 8 KB of W
//     per warp in flight, issued before any arithmetic, and the same group of x's rows g
//     and g + 8;
//   - K is permuted inside a chunk, identically for W and x (a sum's terms may be taken in
//     any fixed order): the group a lane holds is 8 consecutive k, of which mma step s
//     takes k = 4s…4s+3 as the fragment's k = 2c, 2c+1, 2c+8, 2c+9. So W needs no shared
//     memory and no shuffles; the accumulators are F32;
//   - x's rows are read from shared memory: normalized there by the norm prologue, or
//     without it copied there by cp.async (stage_rows) where that keeps as many blocks
//     resident. Read from the L2 instead, each chunk of a pass waits for the L2's latency
//     (Qwen2.5-0.5B batch 8 on an H100: 6,554 tokens/s unstaged, 6,993 staged;
//     docs/optimization-log.md);
//   - where every warp has one tile of at most two passes and the grid is wholly resident
//     (Qwen2.5-0.5B's gate/up and down products at batch 8) the second pass of W is copied into
//     shared memory by cp.async before the wait, so that both passes are in flight while the
//     previous kernel finishes (MICROLLM_GEMV_STAGE_W=0 reads it into registers after the
//     first pass instead; the same fragments, so the same sums);
//   - a slice's chunks are accumulated in order, the slices of a split K are added in slice
//     order in shared memory; the order is fixed by (N, K) alone, and a row of the mma (a
//     row of x) never meets another, so a row of x gets the same bits in a call of any
//     number of rows up to 16;
//   - with MICROLLM_GEMV_FINE_SPLIT=1 a tile's K is split finer within a block for the
//     products of fewer than 512 tiles; with MICROLLM_GEMV_CLUSTER_SPLIT=1 for every product,
//     and it may also be split over the blocks of a thread-block cluster (Hopper), for the
//     products whose tiles alone give fewer blocks than SMs (Qwen2.5-0.5B at M = 8: 72–152
//     blocks for 132 SMs); the blocks add each other's slice sums through distributed shared
//     memory, in the same slice order, so there is no global scratch and nothing to zero. Both
//     off by default (H100, batch 8: the fine split over every product 0.991× at
//     Qwen2.5-0.5B and 1.085× at the 1.5B shape, hence the tile limit, not yet measured; with
//     the clusters 0.963× and 1.087×; docs/optimization-log.md).
// gemv_cuda.cu sends it the BF16/F16 calls of 5 to 8 rows: there it streams W faster than
// the CUDA-core kernel, which re-reads x from L1 for every row of W (LM head at M = 8: 101
// against 235 µs, at M = 4 94 against 140); at M = 1 it is slower (LM head 88 against
// 69 µs, the 0.5B shape decodes 1,092 against 1,367 tokens/s); M = 2 and 3 were not
// measured. Past 16 rows the x fragments, re-read for every 8 rows of W, cost more than W
// (0.78 TB/s on the LM head at M = 64). Measurements: docs/optimization-log.md.
// Reference for the fragment layouts: PTX ISA, "Matrix fragments for mma.m16n8k16"
// (ops/attention/flash_mma.cuh holds the wrapper).
#include <cooperative_groups.h>

#include <algorithm>
#include <type_traits>
#include <utility>

#include "../attention/flash_mma.cuh"
#include "gemv_fusion.cuh"
#include "matmul_kernels.h"
#include "microllm/core/switch.h"

namespace microllm::ops::gemv_detail {
namespace {

constexpr int kTileRows = 8;            // output rows per warp: the mma's B columns
constexpr int kChunkGroups = 4;         // 16-byte groups of a row per chunk (one per c)
constexpr int64_t kTargetWarps = 1024;  // 8 KB in flight each: ~8 MB over the GPU
constexpr int kMinSliceGroups = 8;      // a slice keeps at least 2 chunks
// With the cluster split: within a block up to about 1.5 blocks an SM of a 132-SM GPU, past a
// block only while the grid is short of kTargetWarps; slices of a chunk or more.
constexpr int64_t kSplitTargetWarps = 1536;
constexpr int kSplitMinSliceGroups = 4;
constexpr int kMaxClusterBlocks = 4;
// The fine split alone (no clusters) takes only products of fewer tiles than this: the 1.5B
// shape's QKV (256 tiles) and not the gate/up products (608 and 1,120 tiles), where splitting
// finer cost the 0.5B shape 0.9 % on an H100 (docs/optimization-log.md).
constexpr int64_t kFineSplitMaxTiles = 512;

__device__ __forceinline__ uint32_t word(const uint4& v, int i) {
  return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

// M ≤ 16; kEpi: the epilogue; kNorm: the norm prologue; kClustered: p.cluster_blocks > 1
// (a one-block kernel compiles without the cluster's index arithmetic and barriers); kStageW:
// a warp's second pass of W is copied into shared memory before the wait (the host's promise:
// one tile a warp, at most two passes). Dynamic shared memory: with kNorm the normalized rows
// (M, K / 8) as 16-byte groups (without it, with p.stage_x, x's rows), then with split K the
// slices' sums (kGemvWarps, kParts, 8, 16) F32, then with kStageW the staged pass. The grid is at
// most what fits at once; block b serves tile groups b, b + gridDim.x, ... (with clusters of C
// blocks, cluster i = blocks i·C … i·C + C − 1 serves tile groups i, i + gridDim.x / C, ...).
template <class T, int kEpi, bool kNorm, bool kClustered, bool kStageW = false>
__global__ void __launch_bounds__(kGemvThreads) gemv_tensor_core_kernel(GemvParams<T> p) {
  constexpr int kParts = kEpi == kPlain ? 1 : 2;  // weight rows per output row
  constexpr int kChunks = 16 / kParts;            // chunks per lane per pass
  constexpr int kCols = 16;                       // x rows the A tile holds
  extern __shared__ uint4 dynamic_shared[];
  __shared__ float scratch[kNormScratch];  // the prologue's warp sums
  namespace cg = cooperative_groups;
  const int M = p.M, N = p.N, K = p.K, splits = p.splits;
  const int cluster = kClustered ? p.cluster_blocks : 1;
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int rank = kClustered ? static_cast<int>(cg::this_cluster().block_rank()) : 0;
  const int g = lane / 4, c = lane % 4;
  const int groups = K / 8;  // 16-byte groups per row
  const bool x_shared = kNorm || p.stage_x;
  uint4* rows = dynamic_shared;  // (M, groups): x normalized or staged
  float* partial = reinterpret_cast<float*>(dynamic_shared + (x_shared ? M * groups : 0));
  const int tiles_per_block = kGemvWarps / splits;
  const int64_t tiles = (N + kTileRows - 1) / kTileRows;
  const int64_t tile_groups = (tiles + tiles_per_block - 1) / tiles_per_block;
  const int slices = splits * cluster;  // of a tile: `splits` in each block of the cluster
  const int slice = rank * splits + warp % splits;
  const int per_slice = (groups + slices - 1) / slices;
  const int begin = slice * per_slice, end = min(groups, begin + per_slice);
  // With kStageW the second pass is copied into this lane's slots of shared memory
  // (kGemvWarps, kParts, kChunks, 32) before the wait, so that it is in flight together with
  // the first.
  uint4* w_stage = reinterpret_cast<uint4*>(
                       partial + (slices > 1 ? kGemvWarps * kParts * kTileRows * kCols : 0)) +
                   warp * kParts * kChunks * kWarp;
  uint4 wv[kParts][kChunks];  // one pass of row g of the tile: parts × chunks
  const uint4* w_rows[kParts];
  auto point_at = [&](int64_t tile) {
    const int64_t n = tile * kTileRows + g;
#pragma unroll
    for (int q = 0; q < kParts; ++q)
      w_rows[q] =
          n < N ? reinterpret_cast<const uint4*>(p.w + weight_row<T, kEpi>(p, n, q) * K) : nullptr;
  };
  auto load_pass = [&](int g0) {  // the chunks from group g0 on
#pragma unroll
    for (int u = 0; u < kChunks; ++u) {
      const int gi = g0 + u * kChunkGroups + c;
#pragma unroll
      for (int q = 0; q < kParts; ++q)
        wv[q][u] =
            w_rows[q] != nullptr && gi < end ? __ldcs(w_rows[q] + gi) : make_uint4(0, 0, 0, 0);
    }
  };
  // The first pass of W streams in before the wait for the kernel that wrote x.
  const int64_t first_group = blockIdx.x / cluster, group_step = gridDim.x / cluster;
  const int64_t first_tile = first_group * tiles_per_block + warp / splits;
  if (first_tile < tiles) {
    point_at(first_tile);
    load_pass(begin);
    if constexpr (kStageW) {
#pragma unroll
      for (int u = 0; u < kChunks; ++u) {
        const int gi = begin + (kChunks + u) * kChunkGroups + c;
#pragma unroll
        for (int q = 0; q < kParts; ++q) {
          const bool valid = w_rows[q] != nullptr && gi < end;
          copy16_async(&w_stage[(q * kChunks + u) * kWarp + lane],
                       valid ? w_rows[q] + gi : reinterpret_cast<const uint4*>(p.w), valid);
        }
      }
      commit_async();
    }
  }
  enter_dependent_grid();
  if constexpr (kNorm) {
    const Vec16<T> none[2] = {};
    normalize_rows<2, kGemvMaxRows>(p, rows, scratch, none, false);  // 128 registers: 2 an SM
  } else if (p.stage_x && !kClustered)
    stage_rows(p, rows, 0, groups);
  else if (p.stage_x)  // this block's slices' groups
    stage_rows(p, rows, min(groups, rank * splits * per_slice),
               min(groups, (rank + 1) * splits * per_slice));
  const auto* x = reinterpret_cast<const uint4*>(p.x);  // (M, groups)
  auto x_group = [&](int m, int gi) {
    const int64_t at = static_cast<int64_t>(m) * groups + gi;
    return m < M && gi < end ? (x_shared ? rows[at] : __ldg(x + at)) : make_uint4(0, 0, 0, 0);
  };
  for (int64_t tile_group = first_group; tile_group < tile_groups; tile_group += group_step) {
    const int64_t tile = tile_group * tiles_per_block + warp / splits;
    float acc[kParts][4] = {};  // element j: x row g + 8·(j / 2), output row 2c + j % 2
    if (tile < tiles) {         // no early exit: the whole block meets at __syncthreads below
      if (tile_group != first_group) {
        point_at(tile);
        load_pass(begin);
      }
      for (int g0 = begin; g0 < end; g0 += kChunks * kChunkGroups) {
        if (g0 != begin && kStageW) {  // from this lane's own copies
          wait_async<0>();
#pragma unroll
          for (int u = 0; u < kChunks; ++u)
#pragma unroll
            for (int q = 0; q < kParts; ++q) wv[q][u] = w_stage[(q * kChunks + u) * kWarp + lane];
        } else if (g0 != begin) {
          load_pass(g0);
        }
#pragma unroll
        for (int u = 0; u < kChunks; ++u) {
          if (g0 + u * kChunkGroups >= end) break;  // uniform over the warp
          const int gi = g0 + u * kChunkGroups + c;
          const uint4 lo = x_group(g, gi), hi = x_group(g + 8, gi);
#pragma unroll
          for (int s = 0; s < 2; ++s) {
            const uint32_t a[4] = {word(lo, 2 * s), word(hi, 2 * s), word(lo, 2 * s + 1),
                                   word(hi, 2 * s + 1)};
#pragma unroll
            for (int q = 0; q < kParts; ++q) {
              const uint32_t b[2] = {word(wv[q][u], 2 * s), word(wv[q][u], 2 * s + 1)};
              flash::mma_16816<T>(acc[q], a, b);
            }
          }
        }
      }
    }
    if (slices == 1) {
      if (tile < tiles) {
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const int64_t n = tile * kTileRows + 2 * c + j % 2;
          const int m = g + 8 * (j / 2);
          if (n >= N || m >= M) continue;
          float sum[kParts];
#pragma unroll
          for (int q = 0; q < kParts; ++q) sum[q] = acc[q][j];
          finish_row<T, kEpi>(p, n, m, sum);
        }
      }
      continue;
    }
    // partial (kGemvWarps, kParts, 8, kCols): each warp's sums over its slice.
#pragma unroll
    for (int q = 0; q < kParts; ++q)
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int r = 2 * c + j % 2, m = g + 8 * (j / 2);
        partial[((warp * kParts + q) * kTileRows + r) * kCols + m] = acc[q][j];
      }
    // With a cluster, the sums of every block are read through distributed shared memory.
    if constexpr (kClustered)
      cg::this_cluster().sync();
    else
      __syncthreads();
    // One thread of the cluster per (tile of the block, row of the tile, row of x) adds the
    // slices in slice order: block 0's, then block 1's, ...
    const int elements = tiles_per_block * kTileRows * M;
    for (int e = rank * kGemvThreads + threadIdx.x; e < elements; e += cluster * kGemvThreads) {
      const int m = e % M, r = (e / M) % kTileRows, local = e / (M * kTileRows);
      const int64_t n = (tile_group * tiles_per_block + local) * kTileRows + r;
      if (n >= N) continue;
      float sum[kParts];
      for (int b = 0; b < cluster; ++b) {
        const float* sums = kClustered ? cg::this_cluster().map_shared_rank(partial, b) : partial;
#pragma unroll
        for (int q = 0; q < kParts; ++q)
          for (int s = 0; s < splits; ++s) {
            const float v = sums[(((local * splits + s) * kParts + q) * kTileRows + r) * kCols + m];
            sum[q] = b == 0 && s == 0 ? v : sum[q] + v;
          }
      }
      finish_row<T, kEpi>(p, n, m, sum);
    }
    // partial is rewritten by the next tile group (and read by the cluster until then).
    if constexpr (kClustered)
      cg::this_cluster().sync();
    else
      __syncthreads();
  }
}

}  // namespace

// Whether a tile's K slices may spread over a cluster of blocks: MICROLLM_GEMV_CLUSTER_SPLIT=1
// (read at each call, so tests can switch it; off by default until measured).
bool cluster_split_enabled() { return switch_on("MICROLLM_GEMV_CLUSTER_SPLIT"); }

// Whether a tile's K is split finer within a block (kSplitTargetWarps, kSplitMinSliceGroups)
// for products of fewer than kFineSplitMaxTiles tiles: MICROLLM_GEMV_FINE_SPLIT=1 (off by
// default until measured). The cluster split splits every product finer.
bool fine_split_enabled() { return switch_on("MICROLLM_GEMV_FINE_SPLIT"); }

// Whether the tensor-core kernel copies a warp's second pass of W into shared memory before
// its wait where every warp has one tile of at most two passes and the bytes fit with as many
// blocks resident as the grid needs (on by default; MICROLLM_GEMV_STAGE_W=0 turns it off, read
// at each call). It changes where W is read from, never the order of a sum. Qwen2.5-0.5B batch
// 8 context 512 on an H100: 1.015× (1.022× with the chunked paged attention;
// docs/optimization-log.md).
bool stage_w_enabled() { return !switch_off("MICROLLM_GEMV_STAGE_W"); }

// Split-K for a product of `rows` weight rows of `groups` 16-byte groups: the slices of a tile
// double while the grid is short of a target number of warps and each slice keeps a minimum
// of groups. By default: within a block only, up to kGemvWarps slices, target kTargetWarps,
// kMinSliceGroups. With the fine split, for products of fewer than kFineSplitMaxTiles tiles:
// within a block to kSplitTargetWarps with kSplitMinSliceGroups. With the cluster split: that
// for every product, then past kGemvWarps slices over the blocks of a cluster (up to
// kMaxClusterBlocks) while the grid is still short of kTargetWarps. Fixed by (rows, groups)
// and the switches, never by M or by the prologue, so that a fused norm keeps the bits of the
// unfused product.
TensorCoreSplit tensor_core_split(int64_t rows, int64_t groups) {
  const int64_t tiles = (rows + kTileRows - 1) / kTileRows;
  const bool clusters = cluster_split_enabled();
  const bool fine = clusters || (fine_split_enabled() && tiles < kFineSplitMaxTiles);
  const int64_t min_groups = fine ? kSplitMinSliceGroups : kMinSliceGroups;
  auto split_while = [&](int slices, int max_slices, int64_t target) {
    while (slices < max_slices && tiles * slices < target && groups / (2 * slices) >= min_groups)
      slices *= 2;
    return slices;
  };
  int slices = split_while(1, kGemvWarps, fine ? kSplitTargetWarps : kTargetWarps);
  if (clusters && slices == kGemvWarps)
    slices = split_while(slices, kGemvWarps * kMaxClusterBlocks, kTargetWarps);
  const int warps = std::min(slices, kGemvWarps);
  return {warps, slices / warps};
}

template <class T>
void launch_gemv_tensor_core(const GemvParams<T>& params, int epi, bool norm, cudaStream_t stream) {
  GemvParams<T> p = params;
  const int64_t groups = p.K / 8, tiles = ceil_div(static_cast<int64_t>(p.N), kTileRows);
  const int64_t tile_groups = ceil_div(tiles, static_cast<int64_t>(kGemvWarps / p.splits));
  const int64_t cluster = p.cluster_blocks;  // blocks a tile group is spread over
  const int parts = epi == kPlain ? 1 : 2;
  const size_t rows_bytes = static_cast<size_t>(p.M * groups) * sizeof(uint4);
  const size_t sums_bytes =
      p.splits * cluster > 1 ? sizeof(float) * kGemvWarps * parts * kTileRows * 16 : 0;
  // The kernel for the epilogue, the prologue, the cluster and whether W is staged (only
  // without clusters).
  auto pick = [&](auto epilogue, auto stage_w) {
    constexpr int kE = decltype(epilogue)::value;
    constexpr bool kW = decltype(stage_w)::value;
    if constexpr (!kW) {
      if (cluster > 1)
        return norm ? gemv_tensor_core_kernel<T, kE, true, true>
                    : gemv_tensor_core_kernel<T, kE, false, true>;
    }
    return norm ? gemv_tensor_core_kernel<T, kE, true, false, kW>
                : gemv_tensor_core_kernel<T, kE, false, false, kW>;
  };
  auto pick_for = [&](auto stage_w) {
    return epi == kSwiglu ? pick(std::integral_constant<int, kSwiglu>{}, stage_w)
           : epi == kRope ? pick(std::integral_constant<int, kRope>{}, stage_w)
                          : pick(std::integral_constant<int, kPlain>{}, stage_w);
  };
  auto kernel = pick_for(std::false_type{});
  const void* address = reinterpret_cast<const void*>(kernel);
  p.stage_x = !norm && stage_x_fits(address, sums_bytes, rows_bytes, tile_groups * cluster);
  size_t shared = (norm || p.stage_x ? rows_bytes : 0) + sums_bytes;
  // W's second pass staged: a pass is 16 loads of 16 bytes a lane, whatever the epilogue.
  const int64_t pass_groups = (16 / parts) * 4;
  const int64_t per_slice = ceil_div(groups, static_cast<int64_t>(p.splits) * cluster);
  const size_t w_stage_bytes = sizeof(uint4) * kGemvWarps * 16 * kWarp;
  if (cluster == 1 && per_slice > pass_groups && per_slice <= 2 * pass_groups &&
      stage_w_enabled()) {
    const auto staged = pick_for(std::true_type{});
    const void* at = reinterpret_cast<const void*>(staged);
    if (block_fits(at, shared + w_stage_bytes) &&
        resident_blocks(at, shared + w_stage_bytes) >= tile_groups) {
      kernel = staged;
      address = at;
      shared += w_stage_bytes;
    }
  }
  allow_dynamic_shared(address, shared);
  // Whole clusters, at most what fits at once; cluster i serves tile groups i, i + clusters, …
  const int64_t fits = cluster > 1 ? resident_clusters(address, shared, static_cast<int>(cluster))
                                   : resident_blocks(address, shared);
  const int64_t clusters = std::min(tile_groups, fits);
  launch_dependent_clusters("gemv_tensor_core_kernel", kernel,
                            dim3(static_cast<unsigned>(clusters * cluster)), dim3(kGemvThreads),
                            static_cast<unsigned>(cluster), shared, stream, p);
}

template void launch_gemv_tensor_core(const GemvParams<__nv_bfloat16>&, int, bool, cudaStream_t);
template void launch_gemv_tensor_core(const GemvParams<__half>&, int, bool, cudaStream_t);

}  // namespace microllm::ops::gemv_detail
