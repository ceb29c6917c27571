// KV write: stores the keys and values of a step's new tokens into the paged KV cache.
//
// The cache of one layer is a pool of NB blocks of BS token slots (DESIGN §7,
// docs/inference.md): k_cache, v_cache (NB, BS, Hkv, D). Token n of the step goes to slot
// s = slot_mapping[n] = block·BS + offset, i.e. cache[s / BS][s % BS] = k[n] (and v[n]);
// s = −1 writes nothing (graph padding rows). Values are converted to the cache dtype,
// rounding to nearest even (F32 → BF16). Inference only: not recorded by autograd, allocates
// nothing, reads no device value on the host. Slots must lie in [0, NB·BS) or be −1 and no
// two rows may share a slot; the engine checks the ids where they enter, the op does not.
#pragma once

#include "microllm/core/tensor.h"

namespace microllm::ops {

// k, v (N, Hkv, D) floating, one dtype (CPU: f32, f64, bf16, f16; CUDA: f32, bf16, f16); each
// (Hkv, D) row dense but rows may be strided, so (N, Hkv, D) views of a fused QKV output
// work as they are; slot_mapping (N) i32 dense; k_cache, v_cache (NB, BS, Hkv, D) dense,
// f32 or bf16 (one dtype, any compute dtype), written in place. All on one device.
void kv_write(const Tensor& k, const Tensor& v, const Tensor& slot_mapping, const Tensor& k_cache,
              const Tensor& v_cache);

// The attention inputs of a step in one pass: q_out = rope(q) and k_out = rope(k) at each
// row's position (rotate-half, as rope_out with positions (N, 1) and T = 1 per row), then
// k_out and v written to the caches at slot_mapping as kv_write writes them. The values are
// those of cast_out(q, q_out), cast_out(k, k_out), rope_out on both and kv_write(k_out, v):
// on the CPU it runs exactly those ops, on CUDA one kernel. q (N, H, D), k, v (N, Hkv, D) of
// one dtype with dense (heads, D) rows at any row stride (views of the fused projection);
// q_out (N, H, D), k_out (N, Hkv, D) dense, q's dtype (q_out may be q and k_out k when
// those are dense: in place); positions, slot_mapping (N) i32 dense; inv_freq (D/2) f32
// (f64 for f64 q); caches as kv_write takes them.
void rope_kv_write(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& positions,
                   const Tensor& inv_freq, const Tensor& slot_mapping, const Tensor& q_out,
                   const Tensor& k_out, const Tensor& k_cache, const Tensor& v_cache);

}  // namespace microllm::ops
