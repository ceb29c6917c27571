// Matrix products: matmul / batched matmul with optional transposes, and linear layers.
//
// matmul(a, b): a (M, K) or (B, M, K); b (K, N) or (B, K, N); out (M, N) or (B, M, N).
// With trans_a the last two dimensions of a are read as (K, M); with trans_b, b as (N, K).
// A 2-D operand is shared across the batch of the other. CPU GEMM runs through OpenBLAS.
#pragma once

#include "microllm/core/tensor.h"

namespace microllm::ops {

Tensor matmul(const Tensor& a, const Tensor& b, bool trans_a = false, bool trans_b = false);

// y = x · weightᵀ + bias. x (..., in), weight (out, in) (Hugging Face orientation),
// bias (out) or undefined; y (..., out).
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());
// The allocation-free form: linear's GEMM (OpenBLAS / cuBLASLt) and bias, with the same
// values, into a preallocated dense out (..., out) of x's dtype and device; no autograd.
// x, weight and bias dense; f32 or f64 on the CPU (no bf16/f16 widening), f32, bf16 or f16
// on CUDA. out must be separate from the inputs. On CUDA it makes three small host-side
// (1, rows, cols) view handles for cuBLASLt, no device memory; on the CPU nothing at all.
void linear_out(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& out);

// The reference: three plain loops in F64, no BLAS, no autograd. Same shape rules.
Tensor matmul_naive(const Tensor& a, const Tensor& b, bool trans_a = false, bool trans_b = false);

}  // namespace microllm::ops
