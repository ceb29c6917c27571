// CUDA sample / sampling_distribution: one block of 1024 threads per row, F32 or BF16 logits,
// F32 math; the same bits as the CPU reference (sampling_cpu.cpp) because both run the
// arithmetic of sampling_math.h and every sum is an integer sum of fixed-point masses.
//
// Per sampled row, no sort (all state in ~27 KB of shared memory):
//   pass 1        the largest x = logit / T and its id (fixed-order block argmax); a greedy
//                 row of `sample` is split over gridDim.y blocks (MICROLLM_SAMPLE_SPLIT=0:
//                 one block), each writes its slice's best pair to the
//                 workspace, and the last to arrive merges them (the only global scratch: one
//                 pair a block and one counter a row)
//   top-k         radix select of the k-th largest key: 3 passes (digits of 11, 11, 10 bits),
//                 integer histograms in shared memory, the crossing bin found by a block scan
//   top-p         radix select over the top-k set by mass: the key τ of the cut token is the
//                 bin where "mass above" crosses top_p · total (3 passes); ties at τ keep
//                 the lower ids: how many by the closed form, which by one id-order scan
//   draw          per-tile (4096 ids) sums of the kept masses, then an id-order scan of the
//                 one tile holding the target ⌊U·total/2⁶⁴⌋, U = counter_u64(seed, position, 0)
// Each pass re-reads the row (it stays in L2) and recomputes x and exp: cheaper than a
// (B, V) scratch for the decode batch sizes this serves. Histogram and tile sums use integer
// shared-memory atomics, whose results do not depend on their order.
#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "../cuda_common.cuh"
#include "microllm/core/counter_rng.h"
#include "microllm/core/switch.h"
#include "sampling_kernels.h"
#include "sampling_math.h"

namespace microllm::ops {
namespace {

using namespace cuda_detail;
using namespace sampling_math;

constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / kWarp;
constexpr int kBins = 2048;  // the widest radix digit (11 bits)
constexpr int kLevels = 3;
constexpr int kPerThread = 4;                 // consecutive ids per thread in a tile
constexpr int kTile = kThreads * kPerThread;  // ids per tile
constexpr int kMaxTiles = static_cast<int>(kMaxSamplingVocab / kTile);
static_assert(kMaxSamplingVocab % kTile == 0 && kWarps == kWarp);

__device__ __forceinline__ int tile_count(int64_t vocab) {
  return static_cast<int>((vocab + kTile - 1) / kTile);
}
__device__ __forceinline__ int digit_shift(int level) {
  return level == 0 ? 21 : level == 1 ? 10 : 0;
}
__device__ __forceinline__ int digit_bins(int level) { return level == 2 ? 1024 : 2048; }

struct SharedState {
  unsigned int count[kBins];            // radix histogram: tokens per digit
  unsigned long long mass[kBins];       // radix histogram: mass per digit
  unsigned long long tiles[kMaxTiles];  // kept mass per tile of kTile ids
  unsigned long long warp_part[kWarps];
  float best_v[kWarps];
  int best_i[kWarps];
  unsigned int digit, digit_count;
  unsigned long long offset;
  int tile;
  int found;
};

template <class T>
struct Row {
  const T* logits;  // (V)
  int64_t vocab;
  float temperature;
  __device__ float raw(int64_t i) const { return to_float(logits[i]); }
  __device__ float x(int64_t i) const { return scaled_logit(raw(i), temperature); }
};

struct Best {
  float v;
  int i;
};

__device__ __forceinline__ void merge_best(Best& b, float v, int i) {
  if (ranks_above(v, i, b.v, b.i)) b = {v, i};
}

__device__ __forceinline__ Best warp_best(Best b) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2)
    merge_best(b, __shfl_xor_sync(0xffffffffu, b.v, offset),
               __shfl_xor_sync(0xffffffffu, b.i, offset));
  return b;
}

// The best (value, lower id) pair over the block, for every thread. ranks_above is a total
// order on non-NaN pairs, so the result does not depend on the tree.
__device__ Best block_best(Best b, SharedState& s) {
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  b = warp_best(b);
  __syncthreads();
  if (lane == 0) {
    s.best_v[warp] = b.v;
    s.best_i[warp] = b.i;
  }
  __syncthreads();
  return warp_best({s.best_v[lane], s.best_i[lane]});
}

// The best pair of ids [begin, end) of the row, strided over the block's threads, for every
// thread: of the logits themselves for a greedy row, else of x = logit / T.
template <class T>
__device__ Best block_argmax(const Row<T>& row, int64_t begin, int64_t end, bool greedy,
                             SharedState& s) {
  Best best{-INFINITY, kNoId};
  for (int64_t i = begin + threadIdx.x; i < end; i += kThreads)
    merge_best(best, greedy ? row.raw(i) : row.x(i), static_cast<int>(i));
  return block_best(best, s);
}

__device__ __forceinline__ unsigned long long warp_sum_u64(unsigned long long v) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2)
    v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// Exclusive prefix sum of v over the threads in threadIdx order; `total` gets the block's sum.
__device__ unsigned long long block_exclusive_scan(unsigned long long v, SharedState& s,
                                                   unsigned long long& total) {
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  unsigned long long inclusive = v;
  for (int offset = 1; offset < kWarp; offset *= 2) {
    const unsigned long long other = __shfl_up_sync(0xffffffffu, inclusive, offset);
    if (lane >= offset) inclusive += other;
  }
  __syncthreads();  // warp_part may still be read by the previous call
  if (lane == kWarp - 1) s.warp_part[warp] = inclusive;
  __syncthreads();
  if (warp == 0) {
    unsigned long long w = s.warp_part[lane];
    for (int offset = 1; offset < kWarp; offset *= 2) {
      const unsigned long long other = __shfl_up_sync(0xffffffffu, w, offset);
      if (lane >= offset) w += other;
    }
    s.warp_part[lane] = w;
  }
  __syncthreads();
  total = s.warp_part[kWarps - 1];
  return (warp == 0 ? 0ull : s.warp_part[warp - 1]) + inclusive - v;
}

// TopKLogitsWarper's threshold: the key of the k-th largest x (counting equal values).
template <class T>
__device__ uint32_t kth_largest_key(const Row<T>& row, int64_t k, SharedState& s) {
  uint32_t prefix = 0, prefix_mask = 0;
  unsigned long long remaining = static_cast<unsigned long long>(k);
  for (int level = 0; level < kLevels; ++level) {
    const int shift = digit_shift(level), bins = digit_bins(level), per = bins / kThreads;
    __syncthreads();  // the previous level's readers are done
    for (int d = threadIdx.x; d < bins; d += kThreads) s.count[d] = 0;
    __syncthreads();
    for (int64_t i = threadIdx.x; i < row.vocab; i += kThreads) {
      const uint32_t key = order_key(row.x(i));
      if ((key & prefix_mask) == prefix) atomicAdd(&s.count[(key >> shift) & (bins - 1)], 1u);
    }
    __syncthreads();
    // This thread's bins are [first, first + per); the crossing bin holds the k-th key.
    const int first = threadIdx.x * per;
    unsigned long long local = 0, total = 0;
    for (int j = 0; j < per; ++j) local += s.count[first + j];
    const unsigned long long before = block_exclusive_scan(local, s, total);
    unsigned long long above = total - before - local;
    for (int j = per - 1; j >= 0; --j) {
      const unsigned long long c = s.count[first + j];
      if (above < remaining && remaining <= above + c) {
        s.digit = static_cast<unsigned int>(first + j);
        s.offset = above;
      }
      above += c;
    }
    __syncthreads();
    prefix |= s.digit << shift;
    prefix_mask |= static_cast<uint32_t>(bins - 1) << shift;
    remaining -= s.offset;
  }
  return prefix;
}

// Where TopPLogitsWarper cuts the top-k set (key ≥ key_k): the key τ of the last kept
// token, the mass of the set strictly above τ, the number of tokens at τ, the threshold.
struct TopPCut {
  uint32_t key;
  unsigned long long above;
  unsigned int count;
  double threshold;
};

template <class T>
__device__ TopPCut top_p_cut(const Row<T>& row, float max, uint32_t key_k, float top_p,
                             SharedState& s) {
  uint32_t prefix = 0, prefix_mask = 0;
  unsigned long long offset = 0;  // mass of the set above the current prefix's range
  double threshold = 0.0;
  for (int level = 0; level < kLevels; ++level) {
    const int shift = digit_shift(level), bins = digit_bins(level), per = bins / kThreads;
    __syncthreads();
    for (int d = threadIdx.x; d < bins; d += kThreads) {
      s.count[d] = 0;
      s.mass[d] = 0;
    }
    __syncthreads();
    for (int64_t i = threadIdx.x; i < row.vocab; i += kThreads) {
      const float x = row.x(i);
      const uint32_t key = order_key(x);
      if (key < key_k || (key & prefix_mask) != prefix) continue;
      const int d = static_cast<int>((key >> shift) & (bins - 1));
      atomicAdd(&s.count[d], 1u);
      const unsigned long long q = mass_of(exp_nonpositive(sub_rn(x, max)));
      if (q) atomicAdd(&s.mass[d], q);
    }
    __syncthreads();
    const int first = threadIdx.x * per;
    unsigned long long local = 0, total = 0;
    for (int j = 0; j < per; ++j) local += s.mass[first + j];
    const unsigned long long before = block_exclusive_scan(local, s, total);
    if (level == 0) threshold = top_p_threshold(top_p, total);
    // The unique bin where the mass above goes from below the threshold to not below it.
    unsigned long long above = offset + (total - before - local);
    for (int j = per - 1; j >= 0; --j) {
      const unsigned long long h = s.mass[first + j];
      if (below_threshold(above, threshold) && !below_threshold(above + h, threshold)) {
        s.digit = static_cast<unsigned int>(first + j);
        s.offset = above;
        s.digit_count = s.count[first + j];
      }
      above += h;
    }
    __syncthreads();
    prefix |= s.digit << shift;
    prefix_mask |= static_cast<uint32_t>(bins - 1) << shift;
    offset = s.offset;
  }
  return {prefix, offset, s.digit_count, threshold};
}

// Fills s.tiles with the weight of each tile of kTile ids and returns the row's total.
template <class Weight>
__device__ unsigned long long tile_sums(int64_t vocab, Weight weight, SharedState& s) {
  const int tiles = tile_count(vocab);
  __syncthreads();
  for (int t = threadIdx.x; t < tiles; t += kThreads) s.tiles[t] = 0;
  __syncthreads();
  for (int t = 0; t < tiles; ++t) {
    const int64_t base = static_cast<int64_t>(t) * kTile + threadIdx.x * kPerThread;
    unsigned long long local = 0;
    for (int e = 0; e < kPerThread; ++e)
      if (base + e < vocab) local += weight(base + e);
    local = warp_sum_u64(local);
    if (threadIdx.x % kWarp == 0 && local) atomicAdd(&s.tiles[t], local);
  }
  __syncthreads();
  unsigned long long total = 0;
  for (int t = 0; t < tiles; ++t) total += s.tiles[t];
  return total;
}

// After tile_sums: the smallest id whose running weight (in id order) exceeds target
// (target < total).
template <class Weight>
__device__ int find_in_tiles(int64_t vocab, Weight weight, unsigned long long target,
                             SharedState& s) {
  if (threadIdx.x == 0) {
    const int tiles = tile_count(vocab);
    unsigned long long cumulative = 0;
    s.tile = tiles - 1;
    s.offset = 0;
    for (int t = 0; t < tiles; ++t) {
      if (target < cumulative + s.tiles[t]) {
        s.tile = t;
        s.offset = cumulative;
        break;
      }
      cumulative += s.tiles[t];
    }
    s.found = -1;
  }
  __syncthreads();
  const unsigned long long within = target - s.offset;
  const int64_t base = static_cast<int64_t>(s.tile) * kTile + threadIdx.x * kPerThread;
  unsigned long long w[kPerThread], local = 0, total = 0;
  for (int e = 0; e < kPerThread; ++e) {
    w[e] = base + e < vocab ? weight(base + e) : 0ull;
    local += w[e];
  }
  unsigned long long cumulative = block_exclusive_scan(local, s, total);
  if (cumulative <= within && within < cumulative + local) {
    for (int e = 0; e < kPerThread; ++e) {
      cumulative += w[e];
      if (within < cumulative) {
        s.found = static_cast<int>(base + e);
        break;
      }
    }
  }
  __syncthreads();
  return s.found;
}

__device__ void write_one_hot(int64_t vocab, int id, float score, int32_t* out_id, float* scores,
                              float* probs) {
  if (out_id && threadIdx.x == 0) *out_id = id;
  if (!scores) return;
  for (int64_t i = threadIdx.x; i < vocab; i += kThreads) {
    scores[i] = i == id ? score : -INFINITY;
    probs[i] = i == id ? 1.0f : 0.0f;
  }
}

// The greedy split's workspace (sampling_kernels.h): (B, kGreedySplitMax) best pairs, then
// (B) arrival counters (zero before the first call; every call leaves them zero).
struct SplitScratch {
  float* best_v;      // (B, kGreedySplitMax)
  int32_t* best_i;    // (B, kGreedySplitMax)
  unsigned* arrived;  // (B)
};

// Blocks a greedy row is split over: enough rows × blocks to fill the GPU (about 256), at
// least kThreads ids a block, at most kGreedySplitMax.
int greedy_split(int64_t batch, int64_t vocab) {
  const int64_t by_batch = std::max<int64_t>(1, 256 / std::max<int64_t>(batch, 1));
  const int64_t by_vocab = std::max<int64_t>(1, (vocab + kThreads - 1) / kThreads);
  return static_cast<int>(std::min<int64_t>({by_batch, by_vocab, kGreedySplitMax}));
}

// A greedy row split over gridDim.y blocks: this block's slice's best pair, then, in the last
// block to arrive, the best of all slices' pairs. The order is total on non-NaN pairs, so the
// result is the one-block argmax's whatever the slices and the order of arrival.
template <class T>
__device__ void split_argmax(const Row<T>& row, int64_t b, SplitScratch scratch, int32_t* out_id,
                             SharedState& s) {
  const int parts = static_cast<int>(gridDim.y), part = static_cast<int>(blockIdx.y);
  const int64_t per = (row.vocab + parts - 1) / parts;
  const int64_t begin = part * per, end = std::min<int64_t>(row.vocab, begin + per);
  const Best best = block_argmax(row, begin, end, true, s);
  float* best_v = scratch.best_v + b * kGreedySplitMax;    // (kGreedySplitMax)
  int32_t* best_i = scratch.best_i + b * kGreedySplitMax;  // (kGreedySplitMax)
  if (threadIdx.x == 0) {
    best_v[part] = best.v;
    best_i[part] = best.i;
  }
  if (!last_to_arrive(scratch.arrived + b, static_cast<unsigned>(parts))) return;
  if (threadIdx.x >= kWarp) return;
  Best merged{-INFINITY, kNoId};
  if (static_cast<int>(threadIdx.x) < parts)
    merged = {__ldcg(best_v + threadIdx.x), __ldcg(best_i + threadIdx.x)};
  merged = warp_best(merged);
  if (threadIdx.x == 0) *out_id = merged.i == kNoId ? 0 : merged.i;
}

struct ParamPointers {
  const float* temperature;  // (B)
  const int32_t* top_k;      // (B)
  const float* top_p;        // (B)
  const float* min_p;        // (B)
  const int64_t* seed;       // (B), null for the distribution
  const void* position;      // (B) I32 or I64, null for the distribution
  bool position_i64;
};

// kSplit: a grid of (B, parts) blocks whose greedy rows take split_argmax.
template <class T, bool kSplit>
__global__ void __launch_bounds__(kThreads)
    sample_rows_kernel(const T* logits, int64_t vocab, ParamPointers p, int32_t* out_ids,
                       float* out_scores, float* out_probs, SplitScratch split) {
  __shared__ SharedState s;
  enter_dependent_grid();  // launched as a dependent grid
  const int64_t b = blockIdx.x;
  const Row<T> row{logits + b * vocab, vocab, p.temperature[b]};
  int32_t* out_id = out_ids ? out_ids + b : nullptr;
  float* scores = out_scores ? out_scores + b * vocab : nullptr;  // (V)
  float* probs = out_probs ? out_probs + b * vocab : nullptr;     // (V)
  const bool greedy = row.temperature < kGreedyTemperature;
  if constexpr (kSplit) {  // greedy rows take every block of their row, others the first alone
    if (greedy) return split_argmax(row, b, split, out_id, s);
    if (blockIdx.y > 0) return;
  }
  // Pass 1: the argmax of the logits (greedy) or of x = logit / T.
  const Best best = block_argmax(row, 0, vocab, greedy, s);
  const int top = best.i == kNoId ? 0 : best.i;
  if (greedy || !isfinite(best.v)) {
    write_one_hot(vocab, top, greedy ? row.raw(top) : row.x(top), out_id, scores, probs);
    return;
  }
  KeepRule rule;
  rule.max = best.v;
  const int64_t top_k = p.top_k[b];
  if (top_k > 0 && top_k < vocab) rule.key_k = kth_largest_key(row, top_k, s);
  const float top_p = p.top_p[b];
  if (top_p < 1.0f) {
    const TopPCut cut = top_p_cut(row, rule.max, rule.key_k, top_p, s);
    rule.key_p = cut.key;
    // Ties at τ rank by id: the j-th (from 0) stays while above + j·q is below threshold.
    const unsigned long long q = mass_of(exp_nonpositive(sub_rn(key_value(cut.key), rule.max)));
    unsigned int lo = 1, hi = cut.count;  // lo ties certainly kept, hi at most
    while (lo < hi) {
      const unsigned int mid = lo + (hi - lo + 1) / 2;
      if (below_threshold(cut.above + static_cast<unsigned long long>(mid - 1) * q, cut.threshold))
        lo = mid;
      else
        hi = mid - 1;
    }
    if (lo < cut.count) {
      // The first removed tie: the lo-th (from 0) id holding τ.
      const uint32_t key_p = cut.key;
      auto at_cut = [&](int64_t i) -> unsigned long long {
        return order_key(row.x(i)) == key_p ? 1ull : 0ull;
      };
      tile_sums(vocab, at_cut, s);
      rule.id_cut = find_in_tiles(vocab, at_cut, lo, s);
    }
  }
  rule.min_p = p.min_p[b];
  auto kept_mass = [&](int64_t i) -> unsigned long long {
    const float x = row.x(i), e = exp_nonpositive(sub_rn(x, rule.max));
    return rule.kept(x, i, e) ? mass_of(e) : 0ull;
  };
  const unsigned long long total = tile_sums(vocab, kept_mass, s);
  if (out_id) {
    const uint64_t position =
        p.position_i64 ? static_cast<uint64_t>(static_cast<const int64_t*>(p.position)[b])
                       : static_cast<uint64_t>(
                             static_cast<int64_t>(static_cast<const int32_t*>(p.position)[b]));
    const uint64_t seed = static_cast<uint64_t>(p.seed[b]);
    const int id =
        total ? find_in_tiles(vocab, kept_mass, counter_below(seed, position, 0, total), s) : -1;
    if (threadIdx.x == 0) *out_id = id < 0 ? top : id;
  }
  if (scores) {
    for (int64_t i = threadIdx.x; i < vocab; i += kThreads) {
      const float x = row.x(i), e = exp_nonpositive(sub_rn(x, rule.max));
      const bool kept = rule.kept(x, i, e);
      scores[i] = kept ? x : -INFINITY;
      probs[i] = kept ? probability(mass_of(e), total) : 0.0f;
    }
  }
}

}  // namespace

void sample_rows_cuda(const Tensor& logits, const SamplingTensors& params, const Tensor& out_ids,
                      const Tensor& out_scores, const Tensor& out_probs, const Tensor& workspace) {
  const int64_t batch = logits.size(0), vocab = logits.size(1);
  const bool draw = out_ids.defined();
  // Greedy rows split over blocks (unless MICROLLM_SAMPLE_SPLIT=0) where `sample` draws ids
  // alone and the workspace holds the split's scratch (sample_workspace_bytes).
  const int parts = draw && !out_scores.defined() && !switch_off("MICROLLM_SAMPLE_SPLIT")
                        ? greedy_split(batch, vocab)
                        : 1;
  SplitScratch split{nullptr, nullptr, nullptr};
  if (parts > 1) {
    auto* base = static_cast<std::byte*>(workspace.raw_data());
    const size_t pairs = static_cast<size_t>(batch) * kGreedySplitMax;
    split = {reinterpret_cast<float*>(base),
             reinterpret_cast<int32_t*>(base + pairs * sizeof(float)),
             reinterpret_cast<unsigned*>(base + pairs * (sizeof(float) + sizeof(int32_t)))};
  }
  const dim3 grid(static_cast<unsigned>(batch), static_cast<unsigned>(parts));
  ParamPointers p{ptr<const float>(params.temperature),
                  ptr<const int32_t>(params.top_k),
                  ptr<const float>(params.top_p),
                  ptr<const float>(params.min_p),
                  draw ? ptr<const int64_t>(params.seed) : nullptr,
                  draw ? params.position.raw_data() : nullptr,
                  draw && params.position.dtype() == DType::I64};
  int32_t* ids = draw ? ptr<int32_t>(out_ids) : nullptr;
  float* scores = out_scores.defined() ? ptr<float>(out_scores) : nullptr;
  float* probs = out_probs.defined() ? ptr<float>(out_probs) : nullptr;
  const cudaStream_t stream = stream_of(logits);
  if (logits.dtype() == DType::BF16)
    launch_dependent("sample_rows_kernel",
                     parts > 1 ? sample_rows_kernel<__nv_bfloat16, true>
                               : sample_rows_kernel<__nv_bfloat16, false>,
                     grid, dim3(kThreads), 0, stream, ptr<const __nv_bfloat16>(logits), vocab, p,
                     ids, scores, probs, split);
  else
    launch_dependent("sample_rows_kernel",
                     parts > 1 ? sample_rows_kernel<float, true> : sample_rows_kernel<float, false>,
                     grid, dim3(kThreads), 0, stream, ptr<const float>(logits), vocab, p, ids,
                     scores, probs, split);
}

}  // namespace microllm::ops
