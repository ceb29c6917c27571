// Kernel entry points of SiLU and SwiGLU: elementwise over tensors of equal shape, F32 or F64
// on the CPU; F32, BF16 or F16 on CUDA (F32 arithmetic). SiLU's operands are dense; SwiGLU's
// dense or column blocks of wider matrices (detail::RowLayout, checked by the operator).
#pragma once

#include "microllm/core/tensor.h"

namespace microllm::ops {

void silu_forward_cpu(const Tensor& x, const Tensor& y);
void silu_backward_cpu(const Tensor& x, const Tensor& dy, const Tensor& dx);
void swiglu_forward_cpu(const Tensor& gate, const Tensor& up, const Tensor& y);
void swiglu_backward_cpu(const Tensor& gate, const Tensor& up, const Tensor& dy,
                         const Tensor& dgate, const Tensor& dup);
#if MICROLLM_WITH_CUDA
void silu_forward_cuda(const Tensor& x, const Tensor& y);
void silu_backward_cuda(const Tensor& x, const Tensor& dy, const Tensor& dx);
void swiglu_forward_cuda(const Tensor& gate, const Tensor& up, const Tensor& y);
void swiglu_backward_cuda(const Tensor& gate, const Tensor& up, const Tensor& dy,
                          const Tensor& dgate, const Tensor& dup);
#endif

}  // namespace microllm::ops
