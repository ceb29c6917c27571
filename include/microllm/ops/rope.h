// Rotary position embedding, Hugging Face "rotate half" convention (Su et al. 2021; HF
// modeling_llama.apply_rotary_pos_emb): for pair (x[i], x[i + D/2]) and angle
// θ = position · inv_freq[i], out[i] = x[i]·cos θ − x[i+D/2]·sin θ and
// out[i+D/2] = x[i+D/2]·cos θ + x[i]·sin θ, with inv_freq[i] = theta^(−2i/D).
#pragma once

#include "microllm/core/tensor.h"

namespace microllm::ops {

// theta^(-2i/D) for i in [0, D/2): (D/2) F32 — the unscaled frequencies; scaled variants
// (llama3, linear) are computed by the model config and passed to rope().
Tensor rope_inv_freq(int64_t head_dim, double theta);

// x (B, H, T, D); positions (T) or (B, T) integer; inv_freq (D/2) F32/F64 → (B, H, T, D).
Tensor rope(const Tensor& x, const Tensor& positions, const Tensor& inv_freq);

// The allocation-free form: rope's kernel and values into a preallocated dense out of x's
// shape, dtype and device; no autograd. x with unit stride along D (any strides over B, H,
// T: a transposed (B, T, H, D) view is read in place; f32 or f64 on the CPU, f32, bf16 or
// f16 on CUDA); positions dense I32/I64 (T) or (B, T) on x's device; inv_freq dense (D/2) in f32
// (f64 for f64 x) on x's device — rope converts these, rope_out does not. out may be x
// itself (in place); any other overlap is an Error.
void rope_out(const Tensor& x, const Tensor& positions, const Tensor& inv_freq, const Tensor& out);

// The attention operands of a joined Q/K/V projection, in one pass each way. qkv (B, T,
// H + 2·Hkv, D): heads [0, H) are the queries, [H, H + Hkv) the keys, the rest the values;
// positions (T) or (B, T) integer; inv_freq (D/2) F32/F64. Returns dense
//   q (B, H, T, D)   = rope(query heads, transposed),
//   k (B, Hkv, T, D) = rope(key heads, transposed),
//   v (B, Hkv, T, D) = the value heads, transposed,
// the values (and bits) of split + rope(transpose) + contiguous, without the copies between
// them; the backward writes dqkv (B, T, H + 2·Hkv, D) in one pass (rope's inverse on the query
// and key heads, zeros for an output that received no gradient).
struct QkvHeads {
  Tensor q, k, v;
};
QkvHeads rope_qkv_heads(const Tensor& qkv, int64_t num_heads, int64_t num_kv_heads,
                        const Tensor& positions, const Tensor& inv_freq);

}  // namespace microllm::ops
