// CUDA logprobs: one block of 1024 threads per row, F32 or BF16 logits, F32 math.
// log_softmax at the sampled id from the row max and Σ exp(x − max) (fixed-order block
// reductions); the N largest entries by N block argmax rounds, round r taking the best entry
// ranked after round r − 1's pick (value descending, lower id first). Reference:
// logprobs_cpu.cpp (F64 sum), torch.log_softmax.
#include <cmath>
#include <cstdint>

#include "../cuda_common.cuh"
#include "sampling_kernels.h"
#include "sampling_math.h"

namespace microllm::ops {
namespace {

using namespace cuda_detail;
using sampling_math::kNoId;
using sampling_math::ranks_above;

constexpr int kThreads = 1024;

__device__ __forceinline__ void merge_best(float& v, int& i, float ov, int oi) {
  if (ranks_above(ov, oi, v, i)) {
    v = ov;
    i = oi;
  }
}

__device__ __forceinline__ void warp_best(float& v, int& i) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2)
    merge_best(v, i, __shfl_xor_sync(0xffffffffu, v, offset),
               __shfl_xor_sync(0xffffffffu, i, offset));
}

template <class T>
__global__ void __launch_bounds__(kThreads)
    logprobs_kernel(const T* logits, int64_t vocab, const int32_t* ids, float* out_logprobs,
                    int32_t* top_ids, float* top_logprobs, int n) {
  __shared__ float scratch[kWarp];
  __shared__ float best_v[kWarp];
  __shared__ int best_i[kWarp];
  enter_dependent_grid();  // launched as a dependent grid
  const int64_t b = blockIdx.x;
  const T* row = logits + b * vocab;  // (V)
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  float m = -INFINITY;
  for (int64_t i = threadIdx.x; i < vocab; i += kThreads) m = fmaxf(m, to_float(row[i]));
  m = block_max(m, scratch);
  float sum = 0.0f;
  for (int64_t i = threadIdx.x; i < vocab; i += kThreads) sum += expf(to_float(row[i]) - m);
  sum = block_sum(sum, scratch);
  const float log_total = m + logf(sum);
  if (threadIdx.x == 0) {
    const int32_t id = ids[b];
    out_logprobs[b] = id >= 0 && id < vocab ? to_float(row[id]) - log_total : NAN;
  }
  float prev_v = INFINITY;
  int prev_i = -1;
  for (int r = 0; r < n; ++r) {
    float v = -INFINITY;
    int i = kNoId;
    for (int64_t j = threadIdx.x; j < vocab; j += kThreads) {
      const float x = to_float(row[j]);
      if (ranks_above(prev_v, prev_i, x, static_cast<int>(j)))
        merge_best(v, i, x, static_cast<int>(j));
    }
    warp_best(v, i);
    __syncthreads();  // the previous round's readers are done
    if (lane == 0) {
      best_v[warp] = v;
      best_i[warp] = i;
    }
    __syncthreads();
    v = best_v[lane];
    i = best_i[lane];
    warp_best(v, i);
    if (threadIdx.x == 0) {
      top_ids[b * n + r] = i == kNoId ? -1 : i;
      top_logprobs[b * n + r] = i == kNoId ? -INFINITY : to_float(row[i]) - log_total;
    }
    prev_v = v;
    prev_i = i;
  }
}

}  // namespace

void logprobs_rows_cuda(const Tensor& logits, const Tensor& ids, const Tensor& out_logprobs,
                        const Tensor& top_ids, const Tensor& top_logprobs) {
  const int64_t batch = logits.size(0), vocab = logits.size(1);
  const int n = top_ids.defined() ? static_cast<int>(top_ids.size(1)) : 0;
  int32_t* tid = n ? ptr<int32_t>(top_ids) : nullptr;
  float* tlp = n ? ptr<float>(top_logprobs) : nullptr;
  const cudaStream_t stream = stream_of(logits);
  if (logits.dtype() == DType::BF16)
    launch_dependent("logprobs_kernel", logprobs_kernel<__nv_bfloat16>,
                     dim3(static_cast<unsigned>(batch)), dim3(kThreads), 0, stream,
                     ptr<const __nv_bfloat16>(logits), vocab, ptr<const int32_t>(ids),
                     ptr<float>(out_logprobs), tid, tlp, n);
  else
    launch_dependent("logprobs_kernel", logprobs_kernel<float>, dim3(static_cast<unsigned>(batch)),
                     dim3(kThreads), 0, stream, ptr<const float>(logits), vocab,
                     ptr<const int32_t>(ids), ptr<float>(out_logprobs), tid, tlp, n);
}

}  // namespace microllm::ops
