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

}  // namespace microllm::ops
