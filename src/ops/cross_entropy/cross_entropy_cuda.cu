// CUDA cross-entropy: per-row log-sum-exp, the mean loss over kept rows, and the gradient
// of the logits. F32/BF16/F16 logits, F32 arithmetic and statistics, I32/I64 targets.
// Reference: cross_entropy_cpu.cpp (torch.nn.functional.cross_entropy, reduction="mean").
//
// Layouts (dense, row-major): logits, dlogits (N, V); targets, lse (N); loss ().
//   forward   one block per row: running (max m, Σ exp(x − m)) per thread (online
//             softmax, so the row is read once), block_max / block_sum, then thread 0
//             writes lse and the row's loss (0 when ignored) to a scratch (N); one block
//             then sums the scratch in a fixed order and divides by `kept`. No atomics:
//             the loss is the same bit for bit from run to run.
//   backward  one block per row: dlogits = dloss·(exp(x − lse) − onehot)/kept, or 0 on an
//             ignored row. dloss is read on the device: no host synchronization.
//   forward with the gradient (dloss = 1)  one row per thread-block cluster: each block of
//             the cluster copies its slice of the row into shared memory, reduces it to
//             (max, Σ exp(x − max)) as its loads land, with base-2 exponentials on the
//             special function unit; the blocks read each other's pair through distributed
//             shared memory, in rank order (the same lse in every block), and write their
//             slice of the gradient from shared memory. The logits are read once, where the
//             forward and backward kernels read them twice. Rows too long for the largest
//             cluster, or not in 16-byte vectors, take those two kernels instead.
#include <cooperative_groups.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "../cuda_common.cuh"
#include "../row_reduce.cuh"
#include "cross_entropy_kernels.h"

namespace microllm::ops {
namespace {

using namespace cuda_detail;

// logits (N, V); targets, lse, row_loss (N), with rows = N.
template <class T, class I>
__global__ void __launch_bounds__(1024)
    cross_entropy_rows_kernel(const T* logits, const I* targets, int64_t rows, int64_t V,
                              int64_t ignore_index, bool vec, float* lse, float* row_loss) {
  __shared__ float scratch[kWarp];
  // Blocks stride over rows; the trip count is uniform in a block (block reductions inside).
  const RowGroup g = row_group<false>();
  for (int64_t r = g.first; r < rows; r += g.stride) {
    const T* row = logits + r * V;  // (V)
    const RowStats st = row_stats<false>(row, V, vec, g, scratch);
    if (threadIdx.x == 0) {
      const float row_lse = st.max + logf(st.sum);
      lse[r] = row_lse;
      const int64_t t = static_cast<int64_t>(targets[r]);
      float loss = 0.0f;
      // Targets were range-checked on the host; an id outside [0, V) still never reads
      // outside the row, it poisons the loss instead.
      if (t != ignore_index) loss = t >= 0 && t < V ? row_lse - to_float(row[t]) : NAN;
      row_loss[r] = loss;
    }
  }
}

// loss = Σ row_loss / kept (0 when kept = 0), by one block: each thread sums a fixed
// stride of rows, then block_sum; the order depends only on `rows` and the block size.
// row_loss (N); loss (), with rows = N.
__global__ void __launch_bounds__(1024)
    mean_over_kept_kernel(const float* row_loss, int64_t rows, int64_t kept, float* loss) {
  __shared__ float scratch[kWarp];
  float part = 0.0f;
  for (int64_t i = threadIdx.x; i < rows; i += blockDim.x) part += row_loss[i];
  const float total = block_sum(part, scratch);
  if (threadIdx.x == 0) *loss = kept > 0 ? total / static_cast<float>(kept) : 0.0f;
}

// logits, dlogits (N, V); targets, lse (N); dloss (), with rows = N.
template <class T, class I>
__global__ void __launch_bounds__(1024)
    cross_entropy_backward_kernel(const T* logits, const I* targets, const float* lse,
                                  const float* dloss, int64_t rows, int64_t V, int64_t ignore_index,
                                  int64_t kept, bool vec, T* dlogits) {
  // dloss stays on the device (no .item(), no host synchronization); every thread reads it.
  const float scale = kept > 0 ? dloss[0] / static_cast<float>(kept) : 0.0f;
  // No block reductions here, so rows need not be uniform across the block's threads.
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const int64_t t = static_cast<int64_t>(targets[r]);
    const bool ignored = t == ignore_index;
    const float row_lse = lse[r];
    transform_row(logits + r * V, dlogits + r * V, V, vec, row_group<false>(),
                  [&](int64_t v, float x) {
                    if (ignored) return 0.0f;
                    return scale * (expf(x - row_lse) - (v == t ? 1.0f : 0.0f));
                  });
  }
}

// One row's gradient by a cluster of blocks: rank b holds vectors [b·slice_vectors,
// (b + 1)·slice_vectors) of the row in shared memory.
constexpr int kSliceThreads = 512;
constexpr int64_t kMaxSliceBytes = 80 * 1024;  // two blocks an SM
constexpr int kMaxClusterBlocks = 8;           // the portable cluster size
// 16-byte loads a thread of the largest slice, each its own cp.async group, so a load's
// statistics run while the later loads are still in flight.
constexpr int kSliceLoads = static_cast<int>(kMaxSliceBytes / 16 / kSliceThreads);
static_assert(kMaxSliceBytes % (16 * kSliceThreads) == 0);
// Calls f(std::integral_constant<int, i>{}) for i = 0 … kN − 1 (a load's index as a
// constant, for cp.async.wait_group).
template <class F, int... kI>
__device__ __forceinline__ void for_each_index(F&& f, std::integer_sequence<int, kI...>) {
  (f(std::integral_constant<int, kI>{}), ...);
}

// logits, dlogits (N, V) (dlogits may be logits); targets, lse, row_loss (N); V a multiple of
// kVec<T>, rows 16-byte aligned; gridDim.x = N · the cluster's blocks.
template <class T, class I>
__global__ void __launch_bounds__(kSliceThreads)
    cross_entropy_grad_cluster_kernel(const T* logits, const I* targets, int64_t V,
                                      int64_t slice_vectors, int64_t ignore_index, int64_t kept,
                                      float* lse, float* row_loss, T* dlogits) {
  namespace cg = cooperative_groups;
  extern __shared__ __align__(16) unsigned char shared[];
  Vec16<T>* slice = reinterpret_cast<Vec16<T>*>(shared);  // (slice_vectors)
  __shared__ float scratch[kWarp];
  __shared__ float partial[2];  // this block's (max, Σ exp(x − max)), read by the cluster
  const cg::cluster_group cluster = cg::this_cluster();
  const unsigned rank = cluster.block_rank(), blocks = cluster.num_blocks();
  const int64_t r = blockIdx.x / blocks;  // the cluster's row
  const int64_t first = rank * slice_vectors;
  const int64_t count = std::max<int64_t>(0, std::min(slice_vectors, V / kVec<T> - first));
  enter_dependent_grid();

  // Thread x owns vectors x + i·kSliceThreads, i < kSliceLoads; load i is cp.async group i.
  const Vec16<T>* src = reinterpret_cast<const Vec16<T>*>(logits + r * V) + first;  // (count)
#pragma unroll
  for (int i = 0; i < kSliceLoads; ++i) {
    const int64_t j = threadIdx.x + static_cast<int64_t>(i) * kSliceThreads;
    if (j < count) copy16_async(&slice[j], &src[j], true);
    commit_async();
  }
  // The slice's (max, Σ exp(x − max)), each load as it lands; each thread reads back only the
  // vectors it copied.
  OnlineSum a;
  for_each_index(
      [&](auto load) {
        constexpr int i = decltype(load)::value;
        wait_async<kSliceLoads - 1 - i>();
        const int64_t j = threadIdx.x + static_cast<int64_t>(i) * kSliceThreads;
        if (j >= count) return;
        const Vec16<T> v = slice[j];
        float x[kVec<T>];
#pragma unroll
        for (int e = 0; e < kVec<T>; ++e) x[e] = to_float(v.v[e]);
        online_add_many<kVec<T>, true>(a, x);
      },
      std::make_integer_sequence<int, kSliceLoads>{});
  const float m = block_max(a.m, scratch);
  const float s =
      block_sum(a.s == 0.0f ? 0.0f : a.s * exp2_ftz((a.m - m) * kLog2e), scratch);  // NaN kept
  if (threadIdx.x == 0) {
    partial[0] = m;
    partial[1] = s;
  }
  cluster.sync();  // every block's pair written
  float row_max = -INFINITY, row_sum = 0.0f;
  for (unsigned b = 0; b < blocks; ++b)
    row_max = fmaxf(row_max, *cluster.map_shared_rank(&partial[0], b));
  for (unsigned b = 0; b < blocks; ++b) {
    const float bm = *cluster.map_shared_rank(&partial[0], b);
    const float bs = *cluster.map_shared_rank(&partial[1], b);
    row_sum += bs == 0.0f ? 0.0f : bs * expf(bm - row_max);
  }
  // The pairs are read: a block may leave once every block has arrived here.
  asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory");
  const float row_lse = row_max + logf(row_sum);
  const int64_t t = static_cast<int64_t>(targets[r]);
  const bool ignored = t == ignore_index;
  const int64_t begin = first * kVec<T>, end = (first + count) * kVec<T>;  // this slice
  const T* slice_row = reinterpret_cast<const T*>(slice);                  // (count · kVec)
  if (threadIdx.x == 0) {
    if (rank == 0) lse[r] = row_lse;
    // As cross_entropy_rows_kernel: 0 when ignored, NaN for an id outside [0, V).
    if (ignored || t < 0 || t >= V) {
      if (rank == 0) row_loss[r] = ignored ? 0.0f : NAN;
    } else if (t >= begin && t < end) {
      row_loss[r] = row_lse - to_float(slice_row[t - begin]);
    }
  }
  // The gradient for dloss = 1: (exp(x − lse) − onehot) / kept, 0 on an ignored row. Every
  // element is written as exp(x − lse) / kept; the thread that wrote the target's vector then
  // writes the target again with the onehot subtracted (its own store, in program order).
  const float scale = kept > 0 && !ignored ? 1.0f / static_cast<float>(kept) : 0.0f;
  Vec16<T>* out = reinterpret_cast<Vec16<T>*>(dlogits + r * V) + first;  // (count)
#pragma unroll
  for (int i = 0; i < kSliceLoads; ++i) {
    const int64_t j = threadIdx.x + static_cast<int64_t>(i) * kSliceThreads;
    if (j >= count) break;
    const Vec16<T> v = slice[j];
    Vec16<T> o;
#pragma unroll
    for (int e = 0; e < kVec<T>; ++e)
      o.v[e] =
          from_float<T>(ignored ? 0.0f : scale * exp2_ftz((to_float(v.v[e]) - row_lse) * kLog2e));
    out[j] = o;
  }
  if (!ignored && t >= begin && t < end && (t - begin) / kVec<T> % kSliceThreads == threadIdx.x) {
    const float p = exp2_ftz((to_float(slice_row[t - begin]) - row_lse) * kLog2e);
    dlogits[r * V + t] = from_float<T>(scale * (p - 1.0f));
  }
  asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}

// Threads of the block for a row of `units` loads: a power of two from 32 to 1024 giving
// each thread about 8 or more, so short rows do not leave most of a large block idle.
int block_threads_for_row(int64_t units) {
  int threads = kWarp;
  while (threads < 1024 && static_cast<int64_t>(threads) * 8 < units) threads *= 2;
  return threads;
}

void check_operands(const Tensor& logits, const Tensor& targets, const Tensor& lse) {
  MICROLLM_CHECK(
      logits.dim() == 2 && logits.is_contiguous() && targets.is_contiguous() &&
          targets.numel() == logits.size(0) && lse.is_contiguous() &&
          lse.numel() == logits.size(0) && lse.dtype() == DType::F32,
      "cross_entropy",
      "CUDA kernels take dense logits (N, V), targets (N) and f32 lse (N), found logits ",
      logits.describe(), " targets ", targets.describe(), " lse ", lse.describe());
}

}  // namespace

void cross_entropy_forward_cuda(const Tensor& logits, const Tensor& targets, int64_t ignore_index,
                                int64_t kept, const Tensor& lse, const Tensor& loss) {
  check_operands(logits, targets, lse);
  MICROLLM_CHECK(loss.numel() == 1 && loss.dtype() == DType::F32, "cross_entropy",
                 "loss must be one f32 element, found ", loss.describe());
  const int64_t N = logits.size(0), V = logits.size(1);
  const cudaStream_t stream = stream_of(logits);
  // Per-row losses, summed below in a fixed order (deterministic, unlike atomics).
  Tensor row_loss;  // (N) f32
  if (N > 0) {
    row_loss = Tensor::empty({N}, DType::F32, logits.device());
    dispatch_cuda_float(logits.dtype(), "cross_entropy", [&](auto tag) {
      using T = decltype(tag);
      const bool vec = V % kVec<T> == 0 && aligned16({logits.raw_data()});
      const int threads = block_threads_for_row(vec ? V / kVec<T> : V);
      dispatch_cuda_index(targets, "cross_entropy", "targets", [&](auto index_tag) {
        using I = decltype(index_tag);
        cross_entropy_rows_kernel<T, I><<<grid_for(N, 1), threads, 0, stream>>>(
            ptr<const T>(logits), ptr<const I>(targets), N, V, ignore_index, vec, ptr<float>(lse),
            ptr<float>(row_loss));
        CUDA_CHECK_LAUNCH("cross_entropy_rows_kernel");
      });
    });
  }
  constexpr int kSumThreads = 1024;
  mean_over_kept_kernel<<<1, kSumThreads, 0, stream>>>(N > 0 ? ptr<const float>(row_loss) : nullptr,
                                                       N, kept, ptr<float>(loss));
  CUDA_CHECK_LAUNCH("mean_over_kept_kernel");
}

void cross_entropy_backward_cuda(const Tensor& logits, const Tensor& targets, const Tensor& lse,
                                 const Tensor& dloss, int64_t ignore_index, int64_t kept,
                                 const Tensor& dlogits) {
  check_operands(logits, targets, lse);
  MICROLLM_CHECK(dloss.numel() == 1 && dloss.dtype() == DType::F32 && dloss.is_cuda(),
                 "cross_entropy", "dloss must be one f32 element on the device, found ",
                 dloss.describe());
  MICROLLM_CHECK(dlogits.is_contiguous() && dlogits.shape() == logits.shape() &&
                     dlogits.dtype() == logits.dtype(),
                 "cross_entropy", "dlogits ", dlogits.describe(), " must be dense like logits ",
                 logits.describe());
  const int64_t N = logits.size(0), V = logits.size(1);
  if (N == 0 || V == 0) return;
  dispatch_cuda_float(logits.dtype(), "cross_entropy", [&](auto tag) {
    using T = decltype(tag);
    const bool vec = V % kVec<T> == 0 && aligned16({logits.raw_data(), dlogits.raw_data()});
    const int threads = block_threads_for_row(vec ? V / kVec<T> : V);
    dispatch_cuda_index(targets, "cross_entropy", "targets", [&](auto index_tag) {
      using I = decltype(index_tag);
      cross_entropy_backward_kernel<T, I><<<grid_for(N, 1), threads, 0, stream_of(dlogits)>>>(
          ptr<const T>(logits), ptr<const I>(targets), ptr<const float>(lse),
          ptr<const float>(dloss), N, V, ignore_index, kept, vec, ptr<T>(dlogits));
      CUDA_CHECK_LAUNCH("cross_entropy_backward_kernel");
    });
  });
}

void cross_entropy_forward_grad_cuda(const Tensor& logits, const Tensor& targets,
                                     int64_t ignore_index, int64_t kept, const Tensor& lse,
                                     const Tensor& loss, const Tensor& dlogits) {
  check_operands(logits, targets, lse);
  MICROLLM_CHECK(loss.numel() == 1 && loss.dtype() == DType::F32, "cross_entropy",
                 "loss must be one f32 element, found ", loss.describe());
  MICROLLM_CHECK(dlogits.is_contiguous() && dlogits.shape() == logits.shape() &&
                     dlogits.dtype() == logits.dtype(),
                 "cross_entropy", "dlogits ", dlogits.describe(), " must be dense like logits ",
                 logits.describe());
  const int64_t N = logits.size(0), V = logits.size(1);
  const cudaStream_t stream = stream_of(logits);
  Tensor row_loss;  // (N) f32, allocated only when the cluster kernel runs
  if (N > 0) {
    dispatch_cuda_float(logits.dtype(), "cross_entropy", [&](auto tag) {
      using T = decltype(tag);
      const int64_t bytes = V * static_cast<int64_t>(sizeof(T));
      const int64_t blocks = ceil_div(bytes, kMaxSliceBytes);
      if (V % kVec<T> != 0 || !aligned16({logits.raw_data(), dlogits.raw_data()}) ||
          blocks > kMaxClusterBlocks)
        return;
      row_loss = Tensor::empty({N}, DType::F32, logits.device());
      const int64_t slice_vectors = ceil_div(V / kVec<T>, blocks);
      const size_t shared_bytes = static_cast<size_t>(slice_vectors) * 16;
      dispatch_cuda_index(targets, "cross_entropy", "targets", [&](auto index_tag) {
        using I = decltype(index_tag);
        constexpr auto kernel = cross_entropy_grad_cluster_kernel<T, I>;
        static const cudaError_t allowed = cudaFuncSetAttribute(
            kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(kMaxSliceBytes));
        CUDA_CHECK(allowed);
        launch_dependent_clusters(
            "cross_entropy_grad_cluster_kernel", kernel, dim3(static_cast<unsigned>(N * blocks)),
            dim3(kSliceThreads), static_cast<unsigned>(blocks), shared_bytes, stream,
            ptr<const T>(logits), ptr<const I>(targets), V, slice_vectors, ignore_index, kept,
            ptr<float>(lse), ptr<float>(row_loss), ptr<T>(dlogits));
      });
    });
  }
  if (!row_loss.defined()) {  // the two kernels; the backward reads each element before writing it
    cross_entropy_forward_cuda(logits, targets, ignore_index, kept, lse, loss);
    const Tensor one = Tensor::full({}, 1.0, DType::F32, logits.device());  // () dloss = 1
    cross_entropy_backward_cuda(logits, targets, lse, one, ignore_index, kept, dlogits);
    return;
  }
  constexpr int kSumThreads = 1024;
  mean_over_kept_kernel<<<1, kSumThreads, 0, stream>>>(ptr<const float>(row_loss), N, kept,
                                                       ptr<float>(loss));
  CUDA_CHECK_LAUNCH("mean_over_kept_kernel");
}

}  // namespace microllm::ops
