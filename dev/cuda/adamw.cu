// adamw: one AdamW step over a flat parameter buffer as the trainer keeps it (DESIGN §5): BF16
// parameters (the compute copy) and gradients, F32 master weights and moments, n elements
// each, dense. Per element, PyTorch's AdamW with decoupled weight decay, every operation
// rounded to F32 in this order, as the library's fused kernel does (src/ops/adamw/adamw_cuda.cu,
// whose bits equal the reference optimizer's elementwise operators):
//   m = β1·m + (1 − β1)·g        v = β2·v + (1 − β2)·g²        w = w·(1 − lr·λ)
//   w = w − (lr / bias1)·m / (sqrt(v / bias2) + eps)              param = bf16(w)
// The least traffic: read g (2 bytes), m, v, w (4 each); write m, v, w (4 each) and param (2):
// 28 bytes an element. Qwen2.5-0.5B's 494 M parameters need 13.8 GB, 3.25 ms at 4.25 TB/s; the
// library's kernel takes 4.8–5.1 ms of the training step (docs/optimization-log.md).
//   variant 1  the library's kernel: a block of 256 threads per chunk of 4,096 elements, one
//              element per thread and iteration (2- and 4-byte accesses, five loads in flight)
//   variant 2  four consecutive elements per thread and iteration: 16-byte accesses of the F32
//              streams, 8-byte ones of the BF16 streams (a quarter of the memory instructions)
//   variant 3  variant 2 with two runs of four loaded before either is computed (twice the
//              bytes in flight per thread)
// Every variant must give the CPU reference's bits: the same sequence of correctly rounded F32
// operations (the _rn intrinsics on the device keep nvcc from contracting a multiply and an
// add into an FMA; the host reference is compiled without FMA contraction).
//
// Build: make -C dev/cuda    Run: ./build/adamw <variant 1|2|3|all> [n]
// The check runs on 4,194,311 elements (a tail that is not a multiple of 4); the timing on n
// elements (default 494,032,768, the Qwen2.5-0.5B parameter count).
#include <cstring>
#include <string>

#include "common.h"

namespace {

using bf16 = __nv_bfloat16;
constexpr int kThreads = 256;

// The AdamW scalars rounded to F32 once on the host, as the library rounds them.
struct Scalars {
  float beta1, one_minus_beta1, beta2, one_minus_beta2, decay_factor, inv_bias2, step_size, eps;
};

Scalars scalars_for_step(int step) {
  const double lr = 3e-4, beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0.1;
  const double bias1 = 1.0 - std::pow(beta1, step), bias2 = 1.0 - std::pow(beta2, step);
  return {static_cast<float>(beta1),
          static_cast<float>(1.0 - beta1),
          static_cast<float>(beta2),
          static_cast<float>(1.0 - beta2),
          static_cast<float>(1.0 - lr * weight_decay),
          static_cast<float>(1.0 / bias2),
          static_cast<float>(lr / bias1),
          static_cast<float>(eps)};
}

struct Buffers {  // device pointers, n elements each
  bf16* param;
  const bf16* grad;
  float* master;
  float* m;
  float* v;
};

// ---- CPU reference -----------------------------------------------------------------------

// One element on the host: plain float operations, each rounded (x86-64 without FMA, ISO C++).
void adamw_cpu(float g, float& m, float& v, float& w, bf16& param, const Scalars& s) {
  const float m_new = m * s.beta1 + g * s.one_minus_beta1;
  const float v_new = v * s.beta2 + (g * g) * s.one_minus_beta2;
  const float decayed = w * s.decay_factor;
  const float denom = std::sqrt(v_new * s.inv_bias2) + s.eps;
  w = decayed - (m_new * s.step_size) / denom;
  m = m_new;
  v = v_new;
  param = __float2bfloat16(w);
}

// ---- device ------------------------------------------------------------------------------

__device__ __forceinline__ void adamw_element(float g, float& m, float& v, float& w,
                                              const Scalars& s) {
  const float m_new = __fadd_rn(__fmul_rn(m, s.beta1), __fmul_rn(g, s.one_minus_beta1));
  const float v_new =
      __fadd_rn(__fmul_rn(v, s.beta2), __fmul_rn(__fmul_rn(g, g), s.one_minus_beta2));
  const float decayed = __fmul_rn(w, s.decay_factor);
  const float denom = __fadd_rn(__fsqrt_rn(__fmul_rn(v_new, s.inv_bias2)), s.eps);
  w = __fsub_rn(decayed, __fdiv_rn(__fmul_rn(m_new, s.step_size), denom));
  m = m_new;
  v = v_new;
}

// Elements [begin, end) one at a time, thread by thread.
__device__ __forceinline__ void adamw_scalar(const Buffers& b, int64_t begin, int64_t end,
                                             const Scalars& s) {
  for (int64_t i = begin + threadIdx.x; i < end; i += kThreads) {
    float m = b.m[i], v = b.v[i], w = b.master[i];
    adamw_element(__bfloat162float(b.grad[i]), m, v, w, s);
    b.m[i] = m;
    b.v[i] = v;
    b.master[i] = w;
    b.param[i] = __float2bfloat16(w);
  }
}

// variant 1: one element per thread and iteration over the block's chunk.
constexpr int64_t kChunkV1 = 4096;
__global__ void __launch_bounds__(kThreads) adamw_v1(Buffers b, int64_t n, Scalars s) {
  const int64_t begin = static_cast<int64_t>(blockIdx.x) * kChunkV1;
  adamw_scalar(b, begin, min(begin + kChunkV1, n), s);
}

// Four elements starting at i (a multiple of 4): the F32 streams as float4, the BF16 as 8 bytes.
struct Run4 {
  uint2 g;
  float4 m, v, w;
};
__device__ __forceinline__ Run4 load_run(const Buffers& b, int64_t i) {
  return {*reinterpret_cast<const uint2*>(b.grad + i), *reinterpret_cast<const float4*>(b.m + i),
          *reinterpret_cast<const float4*>(b.v + i),
          *reinterpret_cast<const float4*>(b.master + i)};
}
__device__ __forceinline__ void update_run(const Buffers& b, int64_t i, Run4 r, const Scalars& s) {
  const bf16* g = reinterpret_cast<const bf16*>(&r.g);
  adamw_element(__bfloat162float(g[0]), r.m.x, r.v.x, r.w.x, s);
  adamw_element(__bfloat162float(g[1]), r.m.y, r.v.y, r.w.y, s);
  adamw_element(__bfloat162float(g[2]), r.m.z, r.v.z, r.w.z, s);
  adamw_element(__bfloat162float(g[3]), r.m.w, r.v.w, r.w.w, s);
  *reinterpret_cast<float4*>(b.m + i) = r.m;
  *reinterpret_cast<float4*>(b.v + i) = r.v;
  *reinterpret_cast<float4*>(b.master + i) = r.w;
  bf16 p[4] = {__float2bfloat16(r.w.x), __float2bfloat16(r.w.y), __float2bfloat16(r.w.z),
               __float2bfloat16(r.w.w)};
  *reinterpret_cast<uint2*>(b.param + i) = *reinterpret_cast<const uint2*>(p);
}

// variant 2: runs of four elements; the chunk's last elements that do not fill a run one at a time.
constexpr int64_t kChunkV2 = 4096;
__global__ void __launch_bounds__(kThreads) adamw_v2(Buffers b, int64_t n, Scalars s) {
  const int64_t begin = static_cast<int64_t>(blockIdx.x) * kChunkV2;
  const int64_t end = min(begin + kChunkV2, n), runs_end = begin + (end - begin) / 4 * 4;
  for (int64_t i = begin + 4 * threadIdx.x; i < runs_end; i += 4 * kThreads)
    update_run(b, i, load_run(b, i), s);
  adamw_scalar(b, runs_end, end, s);
}

// variant 3: two runs a thread loaded before either is updated.
constexpr int64_t kChunkV3 = 8192;
__global__ void __launch_bounds__(kThreads) adamw_v3(Buffers b, int64_t n, Scalars s) {
  const int64_t begin = static_cast<int64_t>(blockIdx.x) * kChunkV3;
  const int64_t end = min(begin + kChunkV3, n), runs_end = begin + (end - begin) / 4 * 4;
  constexpr int64_t kStride = 4 * kThreads;  // elements between a thread's two runs
  int64_t i = begin + 4 * threadIdx.x;
  for (; i + kStride < runs_end; i += 2 * kStride) {
    const Run4 first = load_run(b, i), second = load_run(b, i + kStride);
    update_run(b, i, first, s);
    update_run(b, i + kStride, second, s);
  }
  if (i < runs_end) update_run(b, i, load_run(b, i), s);
  adamw_scalar(b, runs_end, end, s);
}

void launch(int variant, const Buffers& b, int64_t n, const Scalars& s) {
  auto blocks = [n](int64_t chunk) { return static_cast<unsigned>((n + chunk - 1) / chunk); };
  if (variant == 1) adamw_v1<<<blocks(kChunkV1), kThreads>>>(b, n, s);
  if (variant == 2) adamw_v2<<<blocks(kChunkV2), kThreads>>>(b, n, s);
  if (variant == 3) adamw_v3<<<blocks(kChunkV3), kThreads>>>(b, n, s);
}

// ---- the check and the timing ------------------------------------------------------------

struct DeviceState {
  int64_t n = 0;
  Buffers b{};
  explicit DeviceState(int64_t elements) : n(elements) {
    CUDA_CHECK(cudaMalloc(&b.param, n * sizeof(bf16)));
    CUDA_CHECK(cudaMalloc(const_cast<bf16**>(&b.grad), n * sizeof(bf16)));
    CUDA_CHECK(cudaMalloc(&b.master, n * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&b.m, n * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&b.v, n * sizeof(float)));
  }
  ~DeviceState() {
    cudaFree(b.param);
    cudaFree(const_cast<bf16*>(b.grad));
    cudaFree(b.master);
    cudaFree(b.m);
    cudaFree(b.v);
  }
  DeviceState(const DeviceState&) = delete;
  DeviceState& operator=(const DeviceState&) = delete;
};

// Three steps on host inputs; every output of every element against the CPU reference's bits.
bool check(int variant) {
  const int64_t n = 4194311;
  const std::vector<bf16> grad = lab::random_bf16(n, 11);
  std::vector<float> m(n), v(n), w(n);
  lab::Rng rng(12);
  for (int64_t i = 0; i < n; ++i) {
    m[i] = rng.uniform(-0.01f, 0.01f);
    v[i] = rng.uniform(1e-6f, 1e-4f);
    w[i] = rng.uniform(-0.1f, 0.1f);
  }
  DeviceState d(n);
  CUDA_CHECK(cudaMemcpy(const_cast<bf16*>(d.b.grad), grad.data(), n * sizeof(bf16),
                        cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpy(d.b.m, m.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpy(d.b.v, v.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpy(d.b.master, w.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  lab::poison_nan(d.b.param, n * sizeof(bf16));
  std::vector<bf16> param(n);
  for (int step = 1; step <= 3; ++step) {
    const Scalars s = scalars_for_step(step);
    launch(variant, d.b, n, s);
    for (int64_t i = 0; i < n; ++i)
      adamw_cpu(__bfloat162float(grad[i]), m[i], v[i], w[i], param[i], s);
  }
  CUDA_CHECK(cudaGetLastError());
  CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<float> got_m(n), got_v(n), got_w(n);
  std::vector<bf16> got_param(n);
  CUDA_CHECK(cudaMemcpy(got_m.data(), d.b.m, n * sizeof(float), cudaMemcpyDeviceToHost));
  CUDA_CHECK(cudaMemcpy(got_v.data(), d.b.v, n * sizeof(float), cudaMemcpyDeviceToHost));
  CUDA_CHECK(cudaMemcpy(got_w.data(), d.b.master, n * sizeof(float), cudaMemcpyDeviceToHost));
  CUDA_CHECK(cudaMemcpy(got_param.data(), d.b.param, n * sizeof(bf16), cudaMemcpyDeviceToHost));
  int64_t differ = 0;
  for (int64_t i = 0; i < n; ++i) {
    const bool same =
        std::memcmp(&got_m[i], &m[i], 4) == 0 && std::memcmp(&got_v[i], &v[i], 4) == 0 &&
        std::memcmp(&got_w[i], &w[i], 4) == 0 && std::memcmp(&got_param[i], &param[i], 2) == 0;
    if (!same && differ++ < 5)
      std::printf("  element %lld: m %.9g/%.9g v %.9g/%.9g w %.9g/%.9g (device/host)\n",
                  static_cast<long long>(i), got_m[i], m[i], got_v[i], v[i], got_w[i], w[i]);
  }
  std::printf("variant %d check: %lld elements, 3 steps, %lld differ from the CPU bits: %s\n",
              variant, static_cast<long long>(n), static_cast<long long>(differ),
              differ == 0 ? "ok" : "FAIL");
  return differ == 0;
}

// Device-side inputs for the timing: nonzero gradients, small moments, positive v.
__global__ void fill(Buffers b, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const uint32_t h = static_cast<uint32_t>(i) * 2654435761u;
    const float u = (h >> 8) * (1.0f / 16777216.0f);  // [0, 1)
    const_cast<bf16*>(b.grad)[i] = __float2bfloat16(u - 0.5f + 1e-3f);
    b.m[i] = 1e-3f * (u - 0.5f);
    b.v[i] = 1e-5f * (u + 0.01f);
    b.master[i] = 0.1f * (0.5f - u);
  }
}

void time_variant(int variant, int64_t n) {
  DeviceState d(n);
  fill<<<1024, 256>>>(d.b, n);
  CUDA_CHECK(cudaGetLastError());
  const Scalars s = scalars_for_step(10);
  const double us = lab::median_launch_us([&](int) { launch(variant, d.b, n, s); }, 1, 3, 20);
  std::printf("variant %d n %lld: ", variant, static_cast<long long>(n));
  lab::print_napkin(lab::napkin(us, 28.0 * static_cast<double>(n), 0.0));
  std::printf("\n");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s <variant 1|2|3|all> [n]\n", argv[0]);
    return 2;
  }
  lab::require_device(argv[0]);
  lab::require_kernel_image(argv[0], adamw_v1);
  const std::string which = argv[1];
  const int64_t n = argc > 2 ? std::atoll(argv[2]) : 494032768;
  bool ok = true;
  for (int variant = 1; variant <= 3; ++variant) {
    if (which != "all" && which != std::to_string(variant)) continue;
    ok = check(variant) && ok;
    time_variant(variant, n);
  }
  return ok ? 0 : 1;
}
