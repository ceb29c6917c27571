// Kernel entry points of the elementwise operators (one per device).
#pragma once

#include "microllm/core/tensor.h"

namespace microllm::ops {

enum class BinaryOp { Add, Sub, Mul, Div };
enum class UnaryOp { Neg, Scale, AddScalar, Pow, Exp, Log, Sqrt, Rsqrt };

// a, b: views already expanded to out's shape (stride 0 on broadcast dimensions), F32/F64;
// out: dense, same dtype.
void binary_forward_cpu(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out);
// x: any strides, F32/F64; out: dense, same shape and dtype. `param` is the factor, the
// added value or the exponent.
void unary_forward_cpu(UnaryOp op, double param, const Tensor& x, const Tensor& out);

}  // namespace microllm::ops
