// CUDA multi-tensor AdamW and sum of squares. The host packs up to kMaxTensors tensors of one
// dtype into a kernel argument (their pointers, sizes and first block); each block owns a
// chunk of kChunk elements of one tensor. A model of a few hundred parameters takes about
// ten launches per op instead of thousands of elementwise ones.
//
// The AdamW arithmetic uses the explicitly rounded intrinsics (__fmul_rn, __fadd_rn, ...) so
// that the compiler cannot contract a multiply and an add into one FMA: every operation
// rounds to F32 as the separate elementwise kernels of the reference optimizer do, and the
// result has their bits.
#include <algorithm>

#include "../cuda_common.cuh"
#include "adamw_kernels.h"

namespace microllm::ops {
namespace {

using namespace cuda_detail;

constexpr int kThreads = 256;
constexpr int64_t kChunk = 4096;  // elements per block
constexpr int kMaxTensors = 32;

// Which tensor block `block` of a batch works on: the last whose first block is ≤ it.
template <class Batch>
__device__ __forceinline__ int tensor_of(const Batch& batch, int64_t block) {
  int t = 0;
  while (t + 1 < batch.count && block >= batch.first_block[t + 1]) ++t;
  return t;
}

struct AdamWBatch {
  int count;
  uint32_t decay;  // bit t: weight decay applies to tensor t
  int64_t numel[kMaxTensors];
  int64_t first_block[kMaxTensors];
  void* param[kMaxTensors];
  const void* grad[kMaxTensors];
  float* master[kMaxTensors];
  float* exp_avg[kMaxTensors];
  float* exp_avg_sq[kMaxTensors];
};

// The AdamW scalars rounded to F32, as the elementwise operators round theirs.
struct AdamWFloats {
  float beta1, one_minus_beta1, beta2, one_minus_beta2, decay_factor, inv_bias2, step_size, eps,
      grad_scale;
  bool scaled;
};

template <class T>
__global__ void __launch_bounds__(kThreads) adamw_kernel(AdamWBatch batch, AdamWFloats s) {
  const int t = tensor_of(batch, blockIdx.x);
  const int64_t start = (static_cast<int64_t>(blockIdx.x) - batch.first_block[t]) * kChunk;
  const int64_t end = min(start + kChunk, batch.numel[t]);
  const T* grad = static_cast<const T*>(batch.grad[t]);
  T* param = static_cast<T*>(batch.param[t]);
  float* master = batch.master[t];
  float* m = batch.exp_avg[t];
  float* v = batch.exp_avg_sq[t];
  const bool decay = (batch.decay >> t) & 1u;
  const bool publish = static_cast<void*>(param) != static_cast<void*>(master);
  for (int64_t i = start + threadIdx.x; i < end; i += kThreads) {
    float g = to_float(grad[i]);
    if (s.scaled) g = to_float(from_float<T>(__fmul_rn(g, s.grad_scale)));
    const float m_new = __fadd_rn(__fmul_rn(m[i], s.beta1), __fmul_rn(g, s.one_minus_beta1));
    const float v_new =
        __fadd_rn(__fmul_rn(v[i], s.beta2), __fmul_rn(__fmul_rn(g, g), s.one_minus_beta2));
    const float w = decay ? __fmul_rn(master[i], s.decay_factor) : master[i];
    const float denom = __fadd_rn(__fsqrt_rn(__fmul_rn(v_new, s.inv_bias2)), s.eps);
    const float updated = __fsub_rn(w, __fdiv_rn(__fmul_rn(m_new, s.step_size), denom));
    m[i] = m_new;
    v[i] = v_new;
    master[i] = updated;
    if (publish) param[i] = from_float<T>(updated);
  }
}

struct SquaresBatch {
  int count;
  int64_t numel[kMaxTensors];
  int64_t first_block[kMaxTensors];
  const void* data[kMaxTensors];
};

// partials[block] = Σ F32(x)² over the block's chunk (a fixed tree order).
template <class T>
__global__ void __launch_bounds__(kThreads) squares_kernel(SquaresBatch batch, float* partials) {
  __shared__ float scratch[kWarp];
  const int t = tensor_of(batch, blockIdx.x);
  const int64_t start = (static_cast<int64_t>(blockIdx.x) - batch.first_block[t]) * kChunk;
  const int64_t end = min(start + kChunk, batch.numel[t]);
  const T* x = static_cast<const T*>(batch.data[t]);
  float sum = 0.0f;
  for (int64_t i = start + threadIdx.x; i < end; i += kThreads) {
    const float value = to_float(x[i]);
    sum += value * value;
  }
  sum = block_sum(sum, scratch);
  if (threadIdx.x == 0) partials[blockIdx.x] = sum;
}

// out = Σ partials in a fixed order: thread i takes i, i + 1024, ...; then the block tree.
__global__ void sum_partials_kernel(const float* partials, int64_t n, float* out) {
  __shared__ float scratch[kWarp];
  float sum = 0.0f;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) sum += partials[i];
  sum = block_sum(sum, scratch);
  if (threadIdx.x == 0) *out = sum;
}

// Calls fill(batch, i, first_block) for consecutive runs of at most kMaxTensors tensors of
// one dtype, then launch(batch, dtype, blocks) for each run.
template <class Batch, class Fill, class Launch>
void for_each_batch(size_t n, const std::function<DType(size_t)>& dtype_of,
                    const std::function<int64_t(size_t)>& numel_of, Fill fill, Launch launch) {
  size_t i = 0;
  while (i < n) {
    Batch batch{};
    const DType dtype = dtype_of(i);
    int64_t blocks = 0;
    while (i < n && batch.count < kMaxTensors && dtype_of(i) == dtype) {
      const int64_t numel = numel_of(i);
      if (numel > 0) {
        batch.numel[batch.count] = numel;
        batch.first_block[batch.count] = blocks;
        fill(batch, i);
        ++batch.count;
        blocks += ceil_div(numel, kChunk);
      }
      ++i;
    }
    if (blocks > 0) launch(batch, dtype, blocks);
  }
}

}  // namespace

void adamw_step_cuda(const std::vector<AdamWTensors>& tensors, const AdamWScalars& s) {
  const AdamWFloats f{static_cast<float>(s.beta1),
                      static_cast<float>(1.0 - s.beta1),
                      static_cast<float>(s.beta2),
                      static_cast<float>(1.0 - s.beta2),
                      static_cast<float>(1.0 - s.lr * s.weight_decay),
                      static_cast<float>(1.0 / s.bias2),
                      static_cast<float>(s.lr / s.bias1),
                      static_cast<float>(s.eps),
                      static_cast<float>(s.grad_scale),
                      s.grad_scale != 1.0};
  const cudaStream_t stream = stream_of(tensors.front().param);
  for_each_batch<AdamWBatch>(
      tensors.size(), [&](size_t i) { return tensors[i].param.dtype(); },
      [&](size_t i) { return tensors[i].param.numel(); },
      [&](AdamWBatch& batch, size_t i) {
        const AdamWTensors& t = tensors[i];
        const int k = batch.count;
        if (t.decay && s.weight_decay != 0.0) batch.decay |= 1u << k;
        batch.param[k] = t.param.raw_data();
        batch.grad[k] = t.grad.raw_data();
        batch.master[k] = ptr<float>(t.master);
        batch.exp_avg[k] = ptr<float>(t.exp_avg);
        batch.exp_avg_sq[k] = ptr<float>(t.exp_avg_sq);
      },
      [&](const AdamWBatch& batch, DType dtype, int64_t blocks) {
        dispatch_cuda_float(dtype, "adamw_step", [&](auto tag) {
          using T = decltype(tag);
          adamw_kernel<T><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(batch, f);
          CUDA_CHECK_LAUNCH("adamw_kernel");
        });
      });
}

void sum_of_squares_cuda(const std::vector<Tensor>& tensors, const Tensor& out) {
  int64_t total_blocks = 0;
  for (const Tensor& t : tensors) total_blocks += ceil_div(t.numel(), kChunk);
  if (total_blocks == 0) return;  // out is already 0
  // (total_blocks) F32 partial sums, from the stream-ordered allocator.
  const Tensor partials = Tensor::empty({total_blocks}, DType::F32, out.device());
  const cudaStream_t stream = stream_of(out);
  int64_t offset = 0;
  for_each_batch<SquaresBatch>(
      tensors.size(), [&](size_t i) { return tensors[i].dtype(); },
      [&](size_t i) { return tensors[i].numel(); },
      [&](SquaresBatch& batch, size_t i) { batch.data[batch.count] = tensors[i].raw_data(); },
      [&](const SquaresBatch& batch, DType dtype, int64_t blocks) {
        dispatch_cuda_float(dtype, "sum_of_squares", [&](auto tag) {
          using T = decltype(tag);
          squares_kernel<T><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
              batch, ptr<float>(partials) + offset);
          CUDA_CHECK_LAUNCH("squares_kernel");
        });
        offset += blocks;
      });
  sum_partials_kernel<<<1, 1024, 0, stream>>>(ptr<const float>(partials), total_blocks,
                                              ptr<float>(out));
  CUDA_CHECK_LAUNCH("sum_partials_kernel");
}

}  // namespace microllm::ops
