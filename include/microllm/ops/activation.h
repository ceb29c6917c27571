// SiLU (x·σ(x)) and SwiGLU (silu(gate) · up, the Llama/Qwen MLP nonlinearity, fused).
#pragma once

#include "microllm/core/tensor.h"

namespace microllm::ops {

Tensor silu(const Tensor& x);
// gate, up (..., F) of the same shape → (..., F)
Tensor swiglu(const Tensor& gate, const Tensor& up);

}  // namespace microllm::ops
