// CPU kernels of the elementwise operators: one strided pass, OpenMP across chunks.
#include <cmath>

#include "../common.h"
#include "elementwise_kernels.h"
#include "microllm/core/strided_loop.h"

namespace microllm::ops {

namespace {
template <class T>
T apply_binary(BinaryOp op, T a, T b) {
  switch (op) {
    case BinaryOp::Add:
      return a + b;
    case BinaryOp::Sub:
      return a - b;
    case BinaryOp::Mul:
      return a * b;
    case BinaryOp::Div:
      return a / b;
  }
  return T(0);
}

template <class T>
T apply_unary(UnaryOp op, T param, T x) {
  switch (op) {
    case UnaryOp::Neg:
      return -x;
    case UnaryOp::Scale:
      return x * param;
    case UnaryOp::AddScalar:
      return x + param;
    case UnaryOp::Pow:
      return std::pow(x, param);
    case UnaryOp::Exp:
      return std::exp(x);
    case UnaryOp::Log:
      return std::log(x);
    case UnaryOp::Sqrt:
      return std::sqrt(x);
    case UnaryOp::Rsqrt:
      return T(1) / std::sqrt(x);
  }
  return T(0);
}
}  // namespace

void binary_forward_cpu(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) {
  detail::dispatch_float(out.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* pa = a.data<T>();
    const T* pb = b.data<T>();
    T* po = out.data<T>();
    strided_loop<2>(out.shape(), {a.strides().data(), b.strides().data()},
                    [&](int64_t i, const std::array<int64_t, 2>& o) {
                      po[i] = apply_binary<T>(op, pa[o[0]], pb[o[1]]);
                    });
  });
}

void unary_forward_cpu(UnaryOp op, double param, const Tensor& x, const Tensor& out) {
  detail::dispatch_float(out.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* px = x.data<T>();
    T* po = out.data<T>();
    const T p = static_cast<T>(param);
    strided_loop<1>(out.shape(), {x.strides().data()},
                    [&](int64_t i, const std::array<int64_t, 1>& o) {
                      po[i] = apply_unary<T>(op, p, px[o[0]]);
                    });
  });
}

}  // namespace microllm::ops
