// Kernel entry points of the KV write (contract of kv_write_cpu.cpp and kv_write_cuda.cu).
#pragma once

#include "microllm/core/tensor.h"

namespace microllm::ops {

// Shape of one call; strides are in elements.
struct KvWriteShape {
  int64_t N, Hkv, D;                   // new tokens, KV heads, head dim
  int64_t NB, BS;                      // cache blocks, slots per block
  int64_t k_row_stride, v_row_stride;  // element distance between rows n and n+1 of k, v
};

// k, v (N, Hkv, D) with dense (Hkv, D) rows (CPU: f32/f64/bf16/f16; CUDA: f32/bf16/f16);
// slot_mapping (N) i32 dense; k_cache, v_cache (NB, BS, Hkv, D) dense f32/bf16, written at
// the slots ≥ 0 only. Kernels trust the slots (the engine checked them).
void kv_write_cpu(const KvWriteShape& s, const Tensor& k, const Tensor& v,
                  const Tensor& slot_mapping, const Tensor& k_cache, const Tensor& v_cache);

// rope_kv_write (kv_write.h), validated: row strides of q, k, v in elements; q_out, k_out
// dense. CUDA only (the CPU runs the composed ops).
struct RopeKvWriteShape {
  int64_t N, H, Hkv, D;
  int64_t q_row_stride, k_row_stride, v_row_stride;
};

#if MICROLLM_WITH_CUDA
void rope_kv_write_cuda(const RopeKvWriteShape& s, const Tensor& q, const Tensor& k,
                        const Tensor& v, const Tensor& positions, const Tensor& inv_freq,
                        const Tensor& slot_mapping, const Tensor& q_out, const Tensor& k_out,
                        const Tensor& k_cache, const Tensor& v_cache);
void kv_write_cuda(const KvWriteShape& s, const Tensor& k, const Tensor& v,
                   const Tensor& slot_mapping, const Tensor& k_cache, const Tensor& v_cache);
#endif

}  // namespace microllm::ops
