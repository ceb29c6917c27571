// Elementwise operators with NumPy broadcasting (binary) and unary math.
//
// Binary operators need the same dtype and device on both sides and broadcast shapes like
// PyTorch; their backward sums the gradient back over broadcast dimensions.
#pragma once

#include "microllm/core/tensor.h"

namespace microllm::ops {

Tensor add(const Tensor& a, const Tensor& b);
// out = a + b without allocating or recording autograd: a, b of one shape (no broadcasting,
// any strides), out preallocated dense with that shape, all of one dtype and device (f32 or
// f64 on the CPU; f32, bf16 or f16 on CUDA). out may be a or b itself (in place) when that
// operand is dense; any other overlap is an Error. Same values as add.
void add_out(const Tensor& a, const Tensor& b, const Tensor& out);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);

Tensor neg(const Tensor& x);
Tensor scale(const Tensor& x, double factor);      // x · factor
Tensor add_scalar(const Tensor& x, double value);  // x + value
Tensor pow(const Tensor& x, double exponent);      // x^exponent
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor rsqrt(const Tensor& x);  // 1 / sqrt(x)

}  // namespace microllm::ops

namespace microllm {
inline Tensor operator+(const Tensor& a, const Tensor& b) { return ops::add(a, b); }
inline Tensor operator-(const Tensor& a, const Tensor& b) { return ops::sub(a, b); }
inline Tensor operator*(const Tensor& a, const Tensor& b) { return ops::mul(a, b); }
inline Tensor operator/(const Tensor& a, const Tensor& b) { return ops::div(a, b); }
inline Tensor operator-(const Tensor& x) { return ops::neg(x); }
inline Tensor operator*(const Tensor& x, double s) { return ops::scale(x, s); }
inline Tensor operator*(double s, const Tensor& x) { return ops::scale(x, s); }
}  // namespace microllm
