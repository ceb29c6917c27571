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

// The decode projection: y = x · weightᵀ (+ bias) for a few rows (M ≤ kGemvMaxRows), x (M, in)
// and y dense. Every output element is one fixed-order F32 dot product: the same bits
// whatever M is and whichever rows share the call (batch invariant without a plan), and the
// weight is streamed once for all M rows (decode is bandwidth bound). With
// GemvEpilogue::swiglu, weight is the fused gate/up matrix (2F, in), rows [0, F) gate and
// [F, 2F) up, bias undefined, and y (M, F) = swiglu(gate, up) rounded as
// swiglu_out(linear(x, gate), linear(x, up)) rounds: g and u to x's dtype, then silu(g)·u.
// CPU: f32/f64 (a plain loop, the reference); CUDA: f32, bf16, f16 with in a multiple of
// 16 bytes of elements and 16-byte aligned x, weight, y. No autograd, no allocation.
inline constexpr int64_t kGemvMaxRows = 8;
enum class GemvEpilogue { none, swiglu };
void gemv_out(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& out,
              GemvEpilogue epilogue = GemvEpilogue::none);
// True when gemv_out takes x (rows, in) of `dtype` on `device` against a weight of width in.
bool gemv_supported(Device device, DType dtype, int64_t rows, int64_t in);

// The reference: three plain loops in F64, no BLAS, no autograd. Same shape rules.
Tensor matmul_naive(const Tensor& a, const Tensor& b, bool trans_a = false, bool trans_b = false);

}  // namespace microllm::ops
