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
#include "microllm/core/switch.h"

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

// One element: the gradient g (scaled and rounded to T first where a clip scale applies), the
// moments m and v and the master weight w updated in place.
template <class T>
__device__ __forceinline__ void adamw_element(float g, float& m, float& v, float& w, bool decay,
                                              const AdamWFloats& s) {
  if (s.scaled) g = to_float(from_float<T>(__fmul_rn(g, s.grad_scale)));
  const float m_new = __fadd_rn(__fmul_rn(m, s.beta1), __fmul_rn(g, s.one_minus_beta1));
  const float v_new =
      __fadd_rn(__fmul_rn(v, s.beta2), __fmul_rn(__fmul_rn(g, g), s.one_minus_beta2));
  const float decayed = decay ? __fmul_rn(w, s.decay_factor) : w;
  const float denom = __fadd_rn(__fsqrt_rn(__fmul_rn(v_new, s.inv_bias2)), s.eps);
  w = __fsub_rn(decayed, __fdiv_rn(__fmul_rn(m_new, s.step_size), denom));
  m = m_new;
  v = v_new;
}

// One tensor's pointers in a block.
template <class T>
struct AdamWStreams {
  T* param;
  const T* grad;
  float* master;
  float* m;
  float* v;
  bool decay, publish;  // publish: param is a separate compute copy of master
};

// Elements [begin, end) one at a time, thread by thread.
template <class T>
__device__ __forceinline__ void adamw_elements(const AdamWStreams<T>& b, int64_t begin, int64_t end,
                                               const AdamWFloats& s) {
  for (int64_t i = begin + threadIdx.x; i < end; i += kThreads) {
    float m = b.m[i], v = b.v[i], w = b.master[i];
    adamw_element<T>(to_float(b.grad[i]), m, v, w, b.decay, s);
    b.m[i] = m;
    b.v[i] = v;
    b.master[i] = w;
    if (b.publish) b.param[i] = from_float<T>(w);
  }
}

// Four consecutive elements of T as one aligned access (8 bytes in BF16/F16, 16 in F32).
template <class T>
struct alignas(4 * sizeof(T)) Four {
  T x[4];
};

// Elements [begin, end) in runs of four a thread (begin and every pointer aligned to four
// elements): the F32 streams as 16-byte accesses, a quarter of the memory instructions of
// adamw_elements and four times the bytes in flight a load; the tail one at a time.
template <class T>
__device__ __forceinline__ void adamw_runs(const AdamWStreams<T>& b, int64_t begin, int64_t end,
                                           const AdamWFloats& s) {
  const int64_t runs_end = begin + (end - begin) / 4 * 4;
  for (int64_t i = begin + 4 * threadIdx.x; i < runs_end; i += 4 * kThreads) {
    const Four<T> g = *reinterpret_cast<const Four<T>*>(b.grad + i);
    float4 m = *reinterpret_cast<const float4*>(b.m + i);
    float4 v = *reinterpret_cast<const float4*>(b.v + i);
    float4 w = *reinterpret_cast<const float4*>(b.master + i);
    adamw_element<T>(to_float(g.x[0]), m.x, v.x, w.x, b.decay, s);
    adamw_element<T>(to_float(g.x[1]), m.y, v.y, w.y, b.decay, s);
    adamw_element<T>(to_float(g.x[2]), m.z, v.z, w.z, b.decay, s);
    adamw_element<T>(to_float(g.x[3]), m.w, v.w, w.w, b.decay, s);
    *reinterpret_cast<float4*>(b.m + i) = m;
    *reinterpret_cast<float4*>(b.v + i) = v;
    *reinterpret_cast<float4*>(b.master + i) = w;
    if (b.publish)
      *reinterpret_cast<Four<T>*>(b.param + i) =
          Four<T>{{from_float<T>(w.x), from_float<T>(w.y), from_float<T>(w.z), from_float<T>(w.w)}};
  }
  adamw_elements(b, runs_end, end, s);
}

// A block per chunk of kChunk elements of one tensor. kRuns: runs of four where the tensor's
// pointers allow them (the default; MICROLLM_ADAMW_RUNS=0 takes one element at a time); the
// same operations on every element, so the same bits either way.
template <class T, bool kRuns>
__global__ void __launch_bounds__(kThreads) adamw_kernel(AdamWBatch batch, AdamWFloats s) {
  const int t = tensor_of(batch, blockIdx.x);
  const int64_t start = (static_cast<int64_t>(blockIdx.x) - batch.first_block[t]) * kChunk;
  const int64_t end = min(start + kChunk, batch.numel[t]);
  AdamWStreams<T> b{static_cast<T*>(batch.param[t]),
                    static_cast<const T*>(batch.grad[t]),
                    batch.master[t],
                    batch.exp_avg[t],
                    batch.exp_avg_sq[t],
                    ((batch.decay >> t) & 1u) != 0,
                    static_cast<void*>(batch.param[t]) != static_cast<void*>(batch.master[t])};
  if constexpr (kRuns) {
    const auto aligned = [](const void* p, size_t bytes) {
      return reinterpret_cast<uintptr_t>(p) % bytes == 0;
    };
    if (aligned(b.param, 4 * sizeof(T)) && aligned(b.grad, 4 * sizeof(T)) &&
        aligned(b.master, 16) && aligned(b.m, 16) && aligned(b.v, 16)) {
      adamw_runs(b, start, end, s);  // start is a multiple of kChunk, so of 4
      return;
    }
  }
  adamw_elements(b, start, end, s);
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
  const bool runs = !switch_off("MICROLLM_ADAMW_RUNS");
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
          if (runs)
            adamw_kernel<T, true><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(batch, f);
          else
            adamw_kernel<T, false>
                <<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(batch, f);
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
