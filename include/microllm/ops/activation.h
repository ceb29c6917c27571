// SiLU (x·σ(x)) and SwiGLU (silu(gate) · up, the Llama/Qwen MLP nonlinearity, fused).
#pragma once

#include "microllm/core/tensor.h"

namespace microllm::ops {

Tensor silu(const Tensor& x);
// gate, up (..., F) of the same shape → (..., F). Dense operands, or blocks of columns of a
// dense matrix (the two halves of a joined (..., 2F) gate/up projection, from ops::split), are
// read in place; for the halves of one matrix the gradients are written as the halves of one
// (..., 2F) buffer, which the split's backward joins without a copy.
Tensor swiglu(const Tensor& gate, const Tensor& up);

// Allocation-free forms: the same kernels and values as silu / swiglu, written into a
// preallocated dense `out` of the input's shape, dtype and device; no autograd. Inputs are
// dense (swiglu's may also be blocks of columns of a dense matrix), f32 or f64 on the CPU (no
// bf16/f16 widening), f32, bf16 or f16 on CUDA. out may be an input itself (in place); any
// other overlap is an Error.
void silu_out(const Tensor& x, const Tensor& out);
void swiglu_out(const Tensor& gate, const Tensor& up, const Tensor& out);

}  // namespace microllm::ops
