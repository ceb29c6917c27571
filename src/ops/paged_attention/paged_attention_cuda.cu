// CUDA paged attention: online softmax over 64-key chunks read through the block table, with
// split-K over the chunks for steps with few rows (flash-decoding).
// References: Kwon et al. 2023 (PagedAttention, vLLM); Dao et al. 2023 (Flash-Decoding);
// Milakov & Gimelshein 2018 (online softmax).
//
// Grid (N rows, Hkv · head_blocks, splits): a block serves one new token row, up to
// kPagedHeadsPerBlock query heads of one KV group (one warp per head, so the group shares each
// chunk of K and V) and, in split mode, the chunks z, z + splits, ... of the row. A chunk's
// keys and values land in shared memory as the cache stores them, by cp.async, 64 rows at
// once, the block's next chunk while this one is computed (two stages); a warp scores two
// keys a lane with four partial sums each, takes the chunk's max and sum, and accumulates P·V
// with its lanes over consecutive dims, even and odd keys apart. A single pass folds the
// chunks' states into the row's total with fold(); split mode writes each chunk's state to
// the workspace and the last of a row's partial blocks to finish (a counter per (row, head
// block)) folds them in the same order. The chunk code is shared and fold() rounds explicitly
// (no contraction), so both modes give the same bits, whichever block comes last, and a row's
// result never depends on the rest of the step. A split step's rows of at most
// kShortRowChunks chunks (MICROLLM_PAGED_SHORT_ROWS, 0: none) go as in a single pass. With
// PagedHistory::earlier_steps a block copies its row's place and the history keys of its first
// chunk before it waits for the previous kernel (programmatic launch), q and the step's new keys
// after. Against the earlier kernel of 32-key tiles loaded as F32 with one barrier pair per tile:
// Qwen2.5-0.5B decode 1.07–1.12× faster on an H100 (docs/optimization-log.md).
// Layout: q, out (N, H, D) rows at q_row_stride / out_row_stride; caches (NB, BS, Hkv, D);
// workspace: the counters (N, Hkv · head_blocks) u32 in its first kPagedSplitBelowBlocks
// words (zero between calls), then partial outputs (N, H, chunks, D) and (m, l) pairs
// (N, H, chunks, 2), F32. Every output element has one writer; the only atomic is the
// counter's increment.
#include <cmath>
#include <type_traits>

#include "../cuda_common.cuh"
#include "microllm/core/switch.h"
#include "paged_attention_kernels.h"

namespace microllm::ops {
namespace {

using namespace cuda_detail;

constexpr int kWarps = static_cast<int>(kPagedHeadsPerBlock);  // one query head per warp
constexpr int kThreads = kWarps * kWarp;
constexpr int kChunk = static_cast<int>(kPagedChunkKeys);
constexpr int kCombinePrefetch = 8;  // chunk partials the fold of split mode loads at once
// A row of a split step with at most this many chunks is computed by its block 0 alone, in
// the single pass's order (MICROLLM_PAGED_SHORT_ROWS=N sets N; 0: every row split). Qwen2.5-0.5B
// decode at batch 1 and 8, context 8: 1.049× and 1.027× every row split on an H100.
constexpr int kShortRowChunks = 2;

// The plan as the kernels read it.
struct Dims {
  int N, B, H, Hkv, group, head_blocks, BS, M, max_seq_len, num_chunks, num_splits;
  int64_t q_row_stride, out_row_stride;
  float scale;
  bool split, early_history;
  int alone_chunks;  // split mode: rows of at most this many chunks (−1: none) go alone
};

// The sequence of row n, how many keys it sees (0 for padding rows: output zeros) and the
// first key this step wrote (the sequence's first new token; keys before it are history).
struct RowPlace {
  int b, visible, fresh;
};

__device__ RowPlace place_row(const Dims& s, const int32_t* query_starts, const int32_t* seq_lens,
                              int n) {
  // Binary search for the last b with query_starts[b] <= n.
  int lo = 0, hi = s.B + 1;
  while (lo < hi) {
    const int mid = (lo + hi) / 2;
    if (query_starts[mid] <= n)
      lo = mid + 1;
    else
      hi = mid;
  }
  const int b = lo - 1;
  if (b < 0 || b >= s.B) return {-1, 0, 0};
  const int new_tokens = query_starts[b + 1] - query_starts[b];
  const int position = seq_lens[b] - new_tokens + (n - query_starts[b]);
  return {b, max(0, min(position + 1, s.max_seq_len)), seq_lens[b] - new_tokens};
}

// Running softmax state of one query head over some keys: max m, sum l of exp(score − m) and
// the unnormalized output o; each lane holds o[d] for its kD / 32 consecutive dims
// d = dim(lane, i), the order P·V accumulates them in.
template <int kD>
struct SoftmaxState {
  static constexpr int kPerLane = kD / kWarp;
  float m, l, o[kPerLane];

  static __device__ __forceinline__ int dim(int lane, int i) { return lane * kPerLane + i; }

  __device__ void reset() {
    m = -INFINITY;
    l = 0.0f;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) o[i] = 0.0f;
  }

  // Folds the state of the next chunk (never empty) into this one. The roundings are
  // explicit so that the partial and the combine kernel compute this bit for bit alike.
  __device__ void fold(const SoftmaxState& c) {
    const float m_new = fmaxf(m, c.m);
    const float a = expf(m - m_new), b = expf(c.m - m_new);
    l = __fmaf_rn(c.l, b, __fmul_rn(l, a));
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) o[i] = __fmaf_rn(c.o[i], b, __fmul_rn(o[i], a));
    m = m_new;
  }

  // out[d] = o[d] / l, zeros for a row without keys.
  template <class T>
  __device__ void store(T* out_row, int lane) const {
#pragma unroll
    for (int i = 0; i < kPerLane; ++i)
      out_row[dim(lane, i)] = from_float<T>(l > 0.0f ? __fdiv_rn(o[i], l) : 0.0f);
  }
};

// Workspace slots of chunk c of query row (n, h) = row: partial output and (m, l).
__device__ __forceinline__ int64_t partial_slot(const Dims& s, int64_t row, int c) {
  return row * s.num_chunks + c;
}

// Where a thread of the kernel stands: the block's row n and KV head, its warp and lane,
// the warp's query head h, and whether h is in the group (a group's last block may have
// fewer heads than warps).
struct BlockHeads {
  int n, kv, warp, lane, h;
  bool active;
};
__device__ __forceinline__ BlockHeads block_heads(const Dims& s) {
  const int kv = blockIdx.y / s.head_blocks;
  const int warp = threadIdx.x / kWarp;
  const int h = kv * s.group + (blockIdx.y % s.head_blocks) * kWarps + warp;
  return {static_cast<int>(blockIdx.x),          kv, warp,
          static_cast<int>(threadIdx.x % kWarp), h,  h < (kv + 1) * s.group};
}

// Split mode: stores the state of chunk c of query row (n, h) = row into the workspace. One warp.
template <int kD>
__device__ void store_partial(const Dims& s, float* workspace, int64_t row, int c,
                              const SoftmaxState<kD>& chunk, int lane) {
  using State = SoftmaxState<kD>;
  const int64_t slot = partial_slot(s, row, c);
  float* stats = workspace + static_cast<int64_t>(s.N) * s.H * s.num_chunks * kD;
#pragma unroll
  for (int i = 0; i < State::kPerLane; ++i) workspace[slot * kD + State::dim(lane, i)] = chunk.o[i];
  if (lane == 0) {
    stats[slot * 2] = chunk.m;
    stats[slot * 2 + 1] = chunk.l;
  }
}

// Split mode: whether this block is the last of row n's partial blocks (min(splits, chunks),
// at least block 0) to count; that one folds, and after the fences every partial of the row
// is visible to it. Called by the whole block.
__device__ bool last_to_count(const Dims& s, unsigned* counters, int n, int chunks) {
  const unsigned parts = static_cast<unsigned>(max(1, min(s.num_splits, chunks)));
  return last_to_arrive(counters + static_cast<int64_t>(n) * gridDim.y + blockIdx.y, parts);
}

// Split mode: folds the `chunks` partials of query row (n, h) = row in chunk order and
// stores the normalized output. Called by one warp; the partials come from other blocks, so
// they are read from L2 (__ldcg), past this SM's L1. The loads of kCombinePrefetch chunks
// are issued together (they do not depend on the fold), then folded one by one in chunk
// order: one memory latency per group of chunks.
template <class T, int kD>
__device__ void fold_partials(const Dims& s, int64_t row, int chunks, const float* workspace,
                              T* out_row, int lane) {
  const float* stats = workspace + static_cast<int64_t>(s.N) * s.H * s.num_chunks * kD;
  SoftmaxState<kD> total;
  total.reset();
  for (int c0 = 0; c0 < chunks; c0 += kCombinePrefetch) {
    SoftmaxState<kD> part[kCombinePrefetch];
#pragma unroll
    for (int j = 0; j < kCombinePrefetch; ++j) {
      if (c0 + j >= chunks) break;
      const int64_t slot = partial_slot(s, row, c0 + j);
      part[j].m = __ldcg(stats + slot * 2);
      part[j].l = __ldcg(stats + slot * 2 + 1);
#pragma unroll
      for (int i = 0; i < SoftmaxState<kD>::kPerLane; ++i)
        part[j].o[i] = __ldcg(workspace + slot * kD + SoftmaxState<kD>::dim(lane, i));
    }
#pragma unroll
    for (int j = 0; j < kCombinePrefetch; ++j) {
      if (c0 + j >= chunks) break;
      total.fold(part[j]);
    }
  }
  total.store(out_row, lane);
}
// One stage: a chunk's keys and values, rows padded by 16 bytes, so that 8 lanes reading 16
// bytes of 8 consecutive rows (scores) or a warp reading consecutive dims of one row (P·V)
// meet no bank conflict.
template <class CacheT, int kD>
struct ChunkStage {
  static constexpr int kPitch = kD + kVec<CacheT>;
  CacheT k[kChunk][kPitch];
  CacheT v[kChunk][kPitch];
};

// Starts the copies of rows [row_begin, row_end) of the chunk of `keys` keys from first_key
// into `stage`; rows past `keys` are zero-filled (their values then add nothing). Called by
// the whole block.
template <class CacheT, int kD>
__device__ void load_chunk_async(const Dims& s, const CacheT* k_cache, const CacheT* v_cache,
                                 const int32_t* table_row, int kv, int first_key, int keys,
                                 ChunkStage<CacheT, kD>& stage, int row_begin, int row_end) {
  constexpr int kV = kVec<CacheT>, kRowLoads = kD / kV;
  for (int i = threadIdx.x + row_begin * kRowLoads; i < row_end * kRowLoads; i += kThreads) {
    const int j = i / kRowLoads, d0 = (i % kRowLoads) * kV;
    const bool valid = j < keys;
    int64_t at = 0;  // element offset of the 16 bytes in either cache
    if (valid) {
      const int key = first_key + j;
      const int64_t slot = static_cast<int64_t>(table_row[key / s.BS]) * s.BS + key % s.BS;
      at = (slot * s.Hkv + kv) * kD + d0;
    }
    copy16_async(&stage.k[j][d0], k_cache + at, valid);
    copy16_async(&stage.v[j][d0], v_cache + at, valid);
  }
}

// kN consecutive elements of shared memory as F32 (kN · sizeof(CacheT) bytes, aligned so).
template <class CacheT, int kN>
__device__ __forceinline__ void load_floats(const CacheT* at, float (&out)[kN]) {
  struct alignas(sizeof(CacheT) * kN) Pack {
    CacheT v[kN];
  };
  const Pack x = *reinterpret_cast<const Pack*>(at);
#pragma unroll
  for (int e = 0; e < kN; ++e) out[e] = to_float(x.v[e]);
}

// The state of one query head (q_row, F32) over the `keys` first rows of a stage. Called by a
// whole warp; probs is the warp's (kChunk) F32 scratch.
template <class CacheT, int kD>
__device__ SoftmaxState<kD> chunk_of_stage(const float* q_row, const ChunkStage<CacheT, kD>& stage,
                                           float* probs, int keys, float scale, int lane) {
  constexpr int kV = kVec<CacheT>, kPerLane = kD / kWarp;
  // Scores of keys lane and lane + 32: dims d ≡ e (mod 4) summed apart, then in pairs.
  float acc[2][4] = {};
#pragma unroll
  for (int d0 = 0; d0 < kD; d0 += kV) {
    float qv[kV];
#pragma unroll
    for (int e = 0; e < kV; e += 4) {
      const float4 f = *reinterpret_cast<const float4*>(q_row + d0 + e);
      qv[e] = f.x;
      qv[e + 1] = f.y;
      qv[e + 2] = f.z;
      qv[e + 3] = f.w;
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float kf[kV];
      load_floats<CacheT, kV>(&stage.k[lane + r * kWarp][d0], kf);
#pragma unroll
      for (int e = 0; e < kV; ++e) acc[r][e % 4] = fmaf(qv[e], kf[e], acc[r][e % 4]);
    }
  }
  float score[2], p[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const float dot = (acc[r][0] + acc[r][1]) + (acc[r][2] + acc[r][3]);
    score[r] = lane + r * kWarp < keys ? dot * scale : -INFINITY;
  }
  SoftmaxState<kD> state;
  state.m = warp_max(fmaxf(score[0], score[1]));  // finite: key 0 of a chunk is visible
#pragma unroll
  for (int r = 0; r < 2; ++r) p[r] = lane + r * kWarp < keys ? expf(score[r] - state.m) : 0.0f;
  state.l = warp_sum(p[0] + p[1]);
  probs[lane] = p[0];
  probs[lane + kWarp] = p[1];
  __syncwarp();
  // o[d] = Σ_j p_j · v[j][d] over all kChunk rows (those past `keys` are zeros with p_j = 0).
  float even[kPerLane] = {}, odd[kPerLane] = {};
#pragma unroll 8
  for (int j = 0; j < kChunk; j += 2) {
    const float2 pj = *reinterpret_cast<const float2*>(probs + j);
    float a[kPerLane], b[kPerLane];
    load_floats<CacheT, kPerLane>(&stage.v[j][lane * kPerLane], a);
    load_floats<CacheT, kPerLane>(&stage.v[j + 1][lane * kPerLane], b);
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      even[i] = fmaf(pj.x, a[i], even[i]);
      odd[i] = fmaf(pj.y, b[i], odd[i]);
    }
  }
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) state.o[i] = even[i] + odd[i];
  return state;
}

template <class CacheT, int kD>
constexpr size_t chunk_stages_bytes() {
  return 2 * sizeof(ChunkStage<CacheT, kD>);
}

// Single pass (grid z = 1: the block takes every chunk of its row) or split mode (block z the
// chunks z, z + num_splits, ...; the row's last block to count folds the partials).
template <class T, class CacheT, int kD>
__global__ void __launch_bounds__(kThreads)
    paged_attention_kernel(Dims s, const T* q, const CacheT* k_cache, const CacheT* v_cache,
                           const int32_t* query_starts, const int32_t* seq_lens,
                           const int32_t* block_tables, T* out, float* workspace,
                           unsigned* counters) {
  using Stage = ChunkStage<CacheT, kD>;
  using State = SoftmaxState<kD>;
  extern __shared__ __align__(16) unsigned char shared[];
  Stage* stages = reinterpret_cast<Stage*>(shared);   // 2 stages
  __shared__ __align__(16) float q_rows[kWarps][kD];  // the block's query rows in F32
  __shared__ __align__(16) float probs[kWarps][kChunk];
  const auto [n, kv, warp, lane, h, active] = block_heads(s);
  // With early history the step's metadata (copied in before the step's first kernel) and
  // the history keys of the block's first chunk are read before the wait for the kernel that
  // wrote q and the new keys: the chain of dependent loads (query_starts, seq_lens, block
  // table, cache) overlaps that kernel's tail instead of following it.
  if (!s.early_history) enter_dependent_grid();  // launched as a dependent grid
  const RowPlace place = place_row(s, query_starts, seq_lens, n);
  const int chunks = (place.visible + kChunk - 1) / kChunk;
  // A row of at most alone_chunks chunks in a split step goes as in a single pass: block 0
  // takes its chunks and folds them itself, with no partials, fences or counter (the same
  // bits, see the file comment). Block 0 always takes part, so a row without keys (padding)
  // still gets its zeros.
  const bool split = s.split && chunks > s.alone_chunks;
  if (s.split && blockIdx.z > 0 && (!split || static_cast<int>(blockIdx.z) >= chunks)) return;
  const int32_t* table_row = block_tables + static_cast<int64_t>(max(place.b, 0)) * s.M;
  const int64_t row = static_cast<int64_t>(n) * s.H + h;  // (n, h) over (N, H)
  const int first = split ? static_cast<int>(blockIdx.z) : 0;
  const int step = split ? s.num_splits : 1;
  const auto keys_of = [&](int c) { return min(kChunk, place.visible - c * kChunk); };
  // The first chunk: with early history its history rows [0, old) before the wait, the
  // step's new keys after it.
  const int old = s.early_history && first < chunks
                      ? max(0, min(keys_of(first), place.fresh - first * kChunk))
                      : 0;
  if (old > 0)
    load_chunk_async<CacheT, kD>(s, k_cache, v_cache, table_row, kv, first * kChunk, keys_of(first),
                                 stages[0], 0, old);
  if (s.early_history) enter_dependent_grid();
  if (first < chunks)
    load_chunk_async<CacheT, kD>(s, k_cache, v_cache, table_row, kv, first * kChunk, keys_of(first),
                                 stages[0], old, kChunk);
  commit_async();
  if (active)
    for (int d = lane; d < kD; d += kWarp)
      q_rows[warp][d] = to_float(q[n * s.q_row_stride + h * kD + d]);

  State total;
  total.reset();
  int i = 0;
  for (int c = first; c < chunks; c += step, ++i) {
    const int next = c + step;
    if (next < chunks) {  // into the stage the previous chunk used
      load_chunk_async<CacheT, kD>(s, k_cache, v_cache, table_row, kv, next * kChunk, keys_of(next),
                                   stages[(i + 1) & 1], 0, kChunk);
      commit_async();
      wait_async<1>();
    } else {
      wait_async<0>();
    }
    __syncthreads();  // every thread's copies of this chunk (and the query rows) are visible
    if (active) {
      const State chunk = chunk_of_stage<CacheT, kD>(q_rows[warp], stages[i & 1], probs[warp],
                                                     keys_of(c), s.scale, lane);
      if (split)
        store_partial(s, workspace, row, c, chunk, lane);
      else
        total.fold(chunk);
    }
    __syncthreads();  // the stage is consumed before the copies of chunk c + 2·step
  }
  if (!split) {
    if (active) total.store(out + n * s.out_row_stride + h * kD, lane);
    return;
  }
  if (!last_to_count(s, counters, n, chunks)) return;
  if (active)
    fold_partials<T, kD>(s, row, chunks, workspace, out + n * s.out_row_stride + h * kD, lane);
}

// Up to how many chunks a split step's row is computed by one block (−1: none), read at each
// call: MICROLLM_PAGED_SHORT_ROWS, kShortRowChunks when unset. Such a row skips the partials'
// stores, the fences, the counter and the fold's loads of split mode.
int short_row_chunks() {
  const int chunks = switch_count("MICROLLM_PAGED_SHORT_ROWS", kShortRowChunks);
  return chunks == 0 ? -1 : chunks;
}

Dims dims_of(const PagedAttentionPlan& p) {
  MICROLLM_CHECK(p.N <= INT32_MAX && p.Hkv * p.head_blocks <= 65535, "paged_attention",
                 "too many rows or heads for the CUDA grid: N ", p.N, " Hkv ", p.Hkv, " H ", p.H);
  MICROLLM_CHECK(p.B < INT32_MAX && p.M <= INT32_MAX && p.BS <= INT32_MAX, "paged_attention",
                 "block tables too large for 32-bit indexing: B ", p.B, " M ", p.M, " BS ", p.BS);
  return Dims{static_cast<int>(p.N),
              static_cast<int>(p.B),
              static_cast<int>(p.H),
              static_cast<int>(p.Hkv),
              static_cast<int>(p.H / p.Hkv),
              static_cast<int>(p.head_blocks),
              static_cast<int>(p.BS),
              static_cast<int>(p.M),
              static_cast<int>(p.max_seq_len),
              static_cast<int>(p.num_chunks),
              static_cast<int>(p.num_splits),
              p.q_row_stride,
              p.out_row_stride,
              static_cast<float>(p.scale),
              p.split,
              p.early_history,
              short_row_chunks()};
}

// Calls fn(std::integral_constant<int, D>{}) for the head dims the kernels are built for.
template <class Fn>
void dispatch_head_dim(int64_t D, Fn&& fn) {
  if (D == 64) return fn(std::integral_constant<int, 64>{});
  if (D == 128) return fn(std::integral_constant<int, 128>{});
  MICROLLM_FAIL("paged_attention",
                "CUDA paged attention takes head dims 64 and 128, found D = ", D);
}

}  // namespace

void paged_attention_cuda(const PagedAttentionPlan& p, const Tensor& q, const Tensor& k_cache,
                          const Tensor& v_cache, const Tensor& query_starts, const Tensor& seq_lens,
                          const Tensor& block_tables, const Tensor& out, const Tensor& workspace) {
  const Dims s = dims_of(p);
  MICROLLM_CHECK(aligned16({k_cache.raw_data(), v_cache.raw_data()}), "paged_attention",
                 "CUDA KV caches must start at 16-byte aligned addresses, found k_cache ",
                 k_cache.describe(), " at ", k_cache.raw_data(), ", v_cache at ",
                 v_cache.raw_data());
  cudaStream_t stream = stream_of(out);
  // Split mode: the counters, then the partials (paged_attention_kernels.h).
  unsigned* counters = p.split ? static_cast<unsigned*>(workspace.raw_data()) : nullptr;
  float* ws = p.split ? ptr<float>(workspace) + kPagedSplitBelowBlocks : nullptr;
  dispatch_head_dim(p.D, [&](auto head_dim) {
    constexpr int kD = decltype(head_dim)::value;
    dispatch_cuda_float(q.dtype(), "paged_attention", [&](auto tag) {
      using T = decltype(tag);
      const auto launch = [&](auto cache_tag) {
        using CacheT = decltype(cache_tag);
        const dim3 grid(static_cast<unsigned>(s.N), static_cast<unsigned>(s.Hkv * s.head_blocks),
                        s.split ? static_cast<unsigned>(s.num_splits) : 1u);
        const auto kernel = paged_attention_kernel<T, CacheT, kD>;
        constexpr size_t kShared = chunk_stages_bytes<CacheT, kD>();
        allow_dynamic_shared(reinterpret_cast<const void*>(kernel), kShared);
        launch_dependent("paged_attention_kernel", kernel, grid, dim3(kThreads), kShared, stream, s,
                         ptr<const T>(q), ptr<const CacheT>(k_cache), ptr<const CacheT>(v_cache),
                         ptr<const int32_t>(query_starts), ptr<const int32_t>(seq_lens),
                         ptr<const int32_t>(block_tables), ptr<T>(out), ws, counters);
      };
      // The cache dtype was checked on the host: f32 or bf16.
      if (k_cache.dtype() == DType::F32)
        launch(float{});
      else
        launch(__nv_bfloat16{});
    });
  });
}

}  // namespace microllm::ops
