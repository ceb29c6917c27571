// CPU SiLU and SwiGLU, forward and backward.
//   silu(x) = x·σ(x);  silu'(x) = σ(x)·(1 + x·(1 − σ(x)))
#include <array>
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

// The operands' RowLayouts (checked by the operator: dense, or column blocks of a wider
// matrix); all have the same rows and cols.
template <size_t N>
std::array<detail::RowLayout, N> layouts_of(const std::array<const Tensor*, N>& operands) {
  std::array<detail::RowLayout, N> layouts{};
  for (size_t i = 0; i < N; ++i) detail::row_layout(*operands[i], layouts[i]);
  return layouts;
}

void swiglu_forward_cpu(const Tensor& gate, const Tensor& up, const Tensor& y) {
  const auto l = layouts_of<3>({&gate, &up, &y});  // gate, up, y: (rows, cols)
  detail::dispatch_float(gate.dtype(), [&](auto tag) {
    using T = decltype(tag);
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < l[0].rows; ++r) {
      const T* pg = gate.data<T>() + r * l[0].ld;
      const T* pu = up.data<T>() + r * l[1].ld;
      T* py = y.data<T>() + r * l[2].ld;
      for (int64_t c = 0; c < l[0].cols; ++c) py[c] = pg[c] * sigmoid(pg[c]) * pu[c];
    }
  });
}

void swiglu_backward_cpu(const Tensor& gate, const Tensor& up, const Tensor& dy,
                         const Tensor& dgate, const Tensor& dup) {
  // gate, up, dy, dgate, dup: (rows, cols)
  const auto l = layouts_of<5>({&gate, &up, &dy, &dgate, &dup});
  detail::dispatch_float(gate.dtype(), [&](auto tag) {
    using T = decltype(tag);
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < l[0].rows; ++r) {
      const T* pg = gate.data<T>() + r * l[0].ld;
      const T* pu = up.data<T>() + r * l[1].ld;
      const T* pdy = dy.data<T>() + r * l[2].ld;
      T* pdg = dgate.data<T>() + r * l[3].ld;
      T* pdu = dup.data<T>() + r * l[4].ld;
      for (int64_t c = 0; c < l[0].cols; ++c) {
        pdg[c] = pdy[c] * pu[c] * silu_grad(pg[c]);
        pdu[c] = pdy[c] * pg[c] * sigmoid(pg[c]);
      }
    }
  });
}

}  // namespace microllm::ops
