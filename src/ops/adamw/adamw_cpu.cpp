// CPU multi-tensor AdamW and sum of squares: plain loops in F32 (the formula of
// microllm/ops/adamw.h, one rounding per operation).
#include <algorithm>
#include <cmath>

#include "../common.h"
#include "adamw_kernels.h"
#include "microllm/core/float_convert.h"

namespace microllm::ops {
namespace {

float load(const void* data, DType dtype, int64_t i) {
  switch (dtype) {
    case DType::BF16:
      return bf16_bits_to_f32(static_cast<const uint16_t*>(data)[i]);
    case DType::F16:
      return f16_bits_to_f32(static_cast<const uint16_t*>(data)[i]);
    default:
      return static_cast<const float*>(data)[i];
  }
}

void store(void* data, DType dtype, int64_t i, float value) {
  switch (dtype) {
    case DType::BF16:
      static_cast<uint16_t*>(data)[i] = f32_to_bf16_bits(value);
      return;
    case DType::F16:
      static_cast<uint16_t*>(data)[i] = f32_to_f16_bits(value);
      return;
    default:
      static_cast<float*>(data)[i] = value;
  }
}

// value rounded through `dtype` and back.
float round_to(DType dtype, float value) {
  switch (dtype) {
    case DType::BF16:
      return bf16_bits_to_f32(f32_to_bf16_bits(value));
    case DType::F16:
      return f16_bits_to_f32(f32_to_f16_bits(value));
    default:
      return value;
  }
}

}  // namespace

void adamw_step_cpu(const std::vector<AdamWTensors>& tensors, const AdamWScalars& s) {
  const float b1 = static_cast<float>(s.beta1), one_minus_b1 = static_cast<float>(1.0 - s.beta1);
  const float b2 = static_cast<float>(s.beta2), one_minus_b2 = static_cast<float>(1.0 - s.beta2);
  const float decay_factor = static_cast<float>(1.0 - s.lr * s.weight_decay);
  const float inv_bias2 = static_cast<float>(1.0 / s.bias2);
  const float step_size = static_cast<float>(s.lr / s.bias1);
  const float eps = static_cast<float>(s.eps);
  const float grad_scale = static_cast<float>(s.grad_scale);
  const bool scaled = s.grad_scale != 1.0;
  for (const AdamWTensors& t : tensors) {
    const DType dtype = t.param.dtype();
    const int64_t n = t.param.numel();
    const void* grad = t.grad.raw_data();
    void* param = t.param.raw_data();
    float* master = t.master.data<float>();  // (n)
    float* m = t.exp_avg.data<float>();      // (n)
    float* v = t.exp_avg_sq.data<float>();   // (n)
    const bool decay = t.decay && s.weight_decay != 0.0;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) {
      float g = load(grad, dtype, i);
      if (scaled) g = round_to(dtype, g * grad_scale);
      m[i] = m[i] * b1 + g * one_minus_b1;
      const float g2 = g * g;
      v[i] = v[i] * b2 + g2 * one_minus_b2;
      const float w = decay ? master[i] * decay_factor : master[i];
      const float denom = std::sqrt(v[i] * inv_bias2) + eps;
      const float update = (m[i] * step_size) / denom;
      master[i] = w - update;
      if (param != master) store(param, dtype, i, master[i]);
    }
  }
}

void sum_of_squares_cpu(const std::vector<Tensor>& tensors, const Tensor& out) {
  // F32 sums over chunks of each tensor, the chunk sums added in F64, all in a fixed order:
  // the same bits every call. Chunks of 1,024 keep the F32 running sum's rounding near
  // 1e-6 relative (a whole flat gradient buffer is one tensor).
  constexpr int64_t kChunk = 1024;
  double total = 0.0;
  for (const Tensor& t : tensors) {
    const void* data = t.raw_data();
    for (int64_t start = 0, n = t.numel(); start < n; start += kChunk) {
      float chunk = 0.0f;
      for (int64_t i = start; i < std::min(n, start + kChunk); ++i) {
        const float x = load(data, t.dtype(), i);
        chunk += x * x;
      }
      total += chunk;
    }
  }
  out.data<float>()[0] = static_cast<float>(total);
}

}  // namespace microllm::ops
