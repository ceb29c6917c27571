// CPU SiLU and SwiGLU, forward and backward.
//   silu(x) = x·σ(x);  silu'(x) = σ(x)·(1 + x·(1 − σ(x)))
#include <cmath>

#include "../common.h"
#include "activation_kernels.h"

namespace microllm::ops {
namespace {
template <class T>
T sigmoid(T x) {
  return T(1) / (T(1) + std::exp(-x));
}
template <class T>
T silu_grad(T x) {
  const T s = sigmoid(x);
  return s * (T(1) + x * (T(1) - s));
}
}  // namespace

void silu_forward_cpu(const Tensor& x, const Tensor& y) {
  detail::dispatch_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* px = x.data<T>();
    T* py = y.data<T>();
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < x.numel(); ++i) py[i] = px[i] * sigmoid(px[i]);
  });
}

void silu_backward_cpu(const Tensor& x, const Tensor& dy, const Tensor& dx) {
  detail::dispatch_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* px = x.data<T>();
    const T* pdy = dy.data<T>();
    T* pdx = dx.data<T>();
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < x.numel(); ++i) pdx[i] = pdy[i] * silu_grad(px[i]);
  });
}

void swiglu_forward_cpu(const Tensor& gate, const Tensor& up, const Tensor& y) {
  detail::dispatch_float(gate.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* pg = gate.data<T>();
    const T* pu = up.data<T>();
    T* py = y.data<T>();
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < gate.numel(); ++i) py[i] = pg[i] * sigmoid(pg[i]) * pu[i];
  });
}

void swiglu_backward_cpu(const Tensor& gate, const Tensor& up, const Tensor& dy,
                         const Tensor& dgate, const Tensor& dup) {
  detail::dispatch_float(gate.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* pg = gate.data<T>();
    const T* pu = up.data<T>();
    const T* pdy = dy.data<T>();
    T* pdg = dgate.data<T>();
    T* pdu = dup.data<T>();
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < gate.numel(); ++i) {
      pdg[i] = pdy[i] * pu[i] * silu_grad(pg[i]);
      pdu[i] = pdy[i] * pg[i] * sigmoid(pg[i]);
    }
  });
}

}  // namespace microllm::ops
