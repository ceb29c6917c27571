// Kernel entry points of RoPE.
#pragma once

#include "microllm/core/tensor.h"

namespace microllm::ops {

// x, y dense (B, H, T, D) F32/F64; positions dense (B, T) I64; inv_freq dense (D/2), x's
// dtype. `inverse` rotates by −θ (the backward of a rotation is its transpose).
void rope_cpu(const Tensor& x, const Tensor& positions, const Tensor& inv_freq, bool inverse,
              const Tensor& y);

}  // namespace microllm::ops
