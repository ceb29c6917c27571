// Kernel entry points of RoPE.
#pragma once

#include "microllm/core/tensor.h"

namespace microllm::ops {

// x, y (B, H, T, D) with unit stride along D and any strides over B, H, T (so a transposed
// (B, T, H, D) projection is read, or a gradient written, in place of a copy) (CPU: F32/F64;
// CUDA: F32/BF16/F16); positions dense I32 or I64,
// (B, T) or (T) shared by the batch; inv_freq dense (D/2), F32 (F64 for F64 x). `inverse`
// rotates by −θ (the backward of a rotation is its transpose). The angle is
// float(position)·inv_freq in inv_freq's dtype. y may be x itself (each pair is read before
// it is written).
void rope_cpu(const Tensor& x, const Tensor& positions, const Tensor& inv_freq, bool inverse,
              const Tensor& y);
#if MICROLLM_WITH_CUDA
void rope_cuda(const Tensor& x, const Tensor& positions, const Tensor& inv_freq, bool inverse,
               const Tensor& y);
#endif

// rope_qkv_heads in either direction. packed (B, T, H + 2·Hkv, D) dense; q (B, H, T, D), k and
// v (B, Hkv, T, D) dense; positions and inv_freq as for rope. to_heads: q and k ← the rotated
// query and key heads of packed, v ← its value heads. Otherwise (the backward) packed ← q and
// k turned back (−θ) and v, where an undefined q, k or v gives zeros. All tensors in one
// kernel dtype (CPU: F32/F64; CUDA: F32/BF16/F16), with the arithmetic of rope's kernels.
void rope_qkv_heads_cpu(const Tensor& packed, const Tensor& q, const Tensor& k, const Tensor& v,
                        const Tensor& positions, const Tensor& inv_freq, int64_t num_heads,
                        int64_t num_kv_heads, bool to_heads);
#if MICROLLM_WITH_CUDA
void rope_qkv_heads_cuda(const Tensor& packed, const Tensor& q, const Tensor& k, const Tensor& v,
                         const Tensor& positions, const Tensor& inv_freq, int64_t num_heads,
                         int64_t num_kv_heads, bool to_heads);
#endif

}  // namespace microllm::ops
