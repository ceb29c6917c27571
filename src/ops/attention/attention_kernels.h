// Kernel entry points of the reference attention.
#pragma once

#include "microllm/core/tensor.h"

namespace microllm::ops {

struct AttentionShape {
  int64_t B, H, Hkv, T, S, D;
  bool causal;
  double scale;
};

// q (B,H,T,D), k/v (B,Hkv,S,D), out (B,H,T,D) dense (CPU: F32/F64; CUDA: F32/BF16/F16);
// probs (B,H,T,S) saved for backward, F32 (F64 for F64 inputs). q_pos (T) and k_pos (S) I64.
// A query with no visible key gets zeros.
void attention_forward_cpu(const AttentionShape& s, const Tensor& q, const Tensor& k,
                           const Tensor& v, const Tensor& q_pos, const Tensor& k_pos,
                           const Tensor& out, const Tensor& probs);
// dq (B,H,T,D), dk/dv (B,Hkv,S,D), all overwritten.
void attention_backward_cpu(const AttentionShape& s, const Tensor& q, const Tensor& k,
                            const Tensor& v, const Tensor& probs, const Tensor& dout,
                            const Tensor& dq, const Tensor& dk, const Tensor& dv);

#if MICROLLM_WITH_CUDA
void attention_forward_cuda(const AttentionShape& s, const Tensor& q, const Tensor& k,
                            const Tensor& v, const Tensor& q_pos, const Tensor& k_pos,
                            const Tensor& out, const Tensor& probs);
void attention_backward_cuda(const AttentionShape& s, const Tensor& q, const Tensor& k,
                             const Tensor& v, const Tensor& probs, const Tensor& dout,
                             const Tensor& dq, const Tensor& dk, const Tensor& dv);

// Flash attention (bf16/f16, D 64 or 128): q, out (B,H,T,D), k/v (B,Hkv,S,D) dense; lse
// (B,H,T) f32 saved for backward (log2 domain, +inf for a query without visible keys).
// q_pos (T) and k_pos (S) dense I64, or both undefined for the default positions (key j at
// j, query t at t + S − T), which let causal masks skip whole tiles.
void flash_attention_forward_cuda(const AttentionShape& s, const Tensor& q, const Tensor& k,
                                  const Tensor& v, const Tensor& q_pos, const Tensor& k_pos,
                                  const Tensor& out, const Tensor& lse);
// dq (B,H,T,D), dk/dv (B,Hkv,S,D), all overwritten; no atomics, so deterministic.
void flash_attention_backward_cuda(const AttentionShape& s, const Tensor& q, const Tensor& k,
                                   const Tensor& v, const Tensor& out, const Tensor& lse,
                                   const Tensor& dout, const Tensor& q_pos, const Tensor& k_pos,
                                   const Tensor& dq, const Tensor& dk, const Tensor& dv);

// The forward on Hopper's warpgroup MMA (flash_attention_wgmma_cuda.cu): the contract of
// flash_attention_forward_cuda for bf16, D 64 or 128, 1 ≤ T ≤ S and default positions on an
// sm_90 device (`flash_wgmma_forward_applies`). flash_attention_forward_cuda takes it where it
// applies and `flash_wgmma_forward_enabled`: at D 128 unless MICROLLM_FLASH_WGMMA is 0 (on an
// H100 1.16× the mma.sync forward, docs/optimization-log.md), at D 64 when it is 1
// (`flash_wgmma_enabled`), and then flash_attention_backward_cuda takes the wgmma dK/dV and dQ
// kernels too (D 64 only; at D 128 the backward is the mma.sync one either way).
bool flash_wgmma_enabled();
bool flash_wgmma_forward_enabled(int64_t D);
bool flash_wgmma_forward_applies(const AttentionShape& s, const Tensor& q, const Tensor& q_pos,
                                 const Tensor& k_pos);
void flash_attention_forward_wgmma_cuda(const AttentionShape& s, const Tensor& q, const Tensor& k,
                                        const Tensor& v, const Tensor& out, const Tensor& lse);
#endif

}  // namespace microllm::ops
