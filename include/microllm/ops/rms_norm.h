// RMSNorm (Zhang & Sennrich 2019) as in Hugging Face Llama/Qwen:
//   y = x / sqrt(mean(x², last dim) + eps) · weight,
// computed in F32 (F64 for F64 inputs), and the fused residual-add + RMSNorm of a block:
//   sum = x + residual; y = rms_norm(sum).
#pragma once

#include "microllm/core/tensor.h"

namespace microllm::ops {

// x (..., C), weight (C) → (..., C)
Tensor rms_norm(const Tensor& x, const Tensor& weight, double eps);

struct AddRmsNormResult {
  Tensor sum;     // (..., C) x + residual, the next residual stream
  Tensor normed;  // (..., C) rms_norm(sum) · weight
};
AddRmsNormResult add_rms_norm(const Tensor& x, const Tensor& residual, const Tensor& weight,
                              double eps);

// Allocation-free forms for inference: the same kernels and values as rms_norm /
// add_rms_norm, written into preallocated dense outputs of x's shape, dtype and device;
// nothing is saved for backward (no rstd) and no autograd is recorded. Operands are f32 or
// f64 on the CPU (no bf16/f16 widening), f32, bf16 or f16 on CUDA; the weight is dense.
// rms_norm_out: x dense; out separate from x and weight.
void rms_norm_out(const Tensor& x, const Tensor& weight, double eps, const Tensor& out);
// sum_out = x + residual (x and residual may be strided), normed_out = rms_norm(sum_out).
// sum_out may be x or residual itself (the residual stream updated in place) and must not
// otherwise overlap them; normed_out must be separate from every other argument.
void add_rms_norm_out(const Tensor& x, const Tensor& residual, const Tensor& weight, double eps,
                      const Tensor& sum_out, const Tensor& normed_out);

}  // namespace microllm::ops
