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

}  // namespace microllm::ops
