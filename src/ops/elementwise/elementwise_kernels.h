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

#if MICROLLM_WITH_CUDA
// Same contracts on CUDA, for F32/BF16/F16 (F32 arithmetic).
void binary_forward_cuda(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out);
void unary_forward_cuda(UnaryOp op, double param, const Tensor& x, const Tensor& out);
#endif

}  // namespace microllm::ops
