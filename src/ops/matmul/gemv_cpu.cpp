// gemv_out on the CPU: the reference loop. Each output element is one dot product summed
// left to right in the compute type (F32 for f32, F64 for f64), plus the bias, rounded once;
// with swiglu the gate and up sums are rounded, then silu(g)·u as swiglu_out computes it.
#include <cmath>

#include "matmul_kernels.h"

namespace microllm::ops {
namespace {

template <class T>
T dot(const T* a, const T* b, int64_t K) {
  T acc = 0;
  for (int64_t k = 0; k < K; ++k) acc += a[k] * b[k];
  return acc;
}

template <class T>
void gemv_rows(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& out,
               bool swiglu) {
  const int64_t M = x.size(0), K = x.size(1), N = out.size(1);
  const T* px = x.data<T>();       // (M, K)
  const T* pw = weight.data<T>();  // (N, K) or (2N, K)
  const T* pb = bias.defined() ? bias.data<T>() : nullptr;
  T* py = out.data<T>();  // (M, N)
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      const T* x_row = px + m * K;
      if (swiglu) {
        const T g = dot(x_row, pw + n * K, K), u = dot(x_row, pw + (N + n) * K, K);
        py[m * N + n] = g * (T(1) / (T(1) + std::exp(-g))) * u;
      } else {
        py[m * N + n] = dot(x_row, pw + n * K, K) + (pb ? pb[n] : T(0));
      }
    }
}

}  // namespace

void gemv_cpu(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& out,
              bool swiglu) {
  if (x.dtype() == DType::F64)
    gemv_rows<double>(x, weight, bias, out, swiglu);
  else
    gemv_rows<float>(x, weight, bias, out, swiglu);
}

}  // namespace microllm::ops
