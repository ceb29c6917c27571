// CPU rope_qkv_heads: the joined projection's rows and the attention's head-major operands,
// either way, with rope_cpu's arithmetic (the angle float(position) · inv_freq in the compute
// dtype, then cos/sin).
#include "../common.h"
#include "rope_kernels.h"
#include "rope_rotate_cpu.h"

namespace microllm::ops {

void rope_qkv_heads_cpu(const Tensor& packed, const Tensor& q, const Tensor& k, const Tensor& v,
                        const Tensor& positions, const Tensor& inv_freq, int64_t num_heads,
                        int64_t num_kv_heads, bool to_heads) {
  const int64_t B = packed.size(0), T = packed.size(1), heads = packed.size(2);
  const int64_t D = packed.size(3), half = D / 2;
  const int64_t H = num_heads, Hkv = num_kv_heads;
  detail::dispatch_float(packed.dtype(), [&](auto tag) {
    using T_ = decltype(tag);
    T_* pp = packed.data<T_>();  // (B, T, H + 2·Hkv, D)
    // Head j of packed lives in part `which` (q, k, v) at head j − first[which].
    const Tensor* parts[3] = {&q, &k, &v};
    const int64_t first[3] = {0, H, H + Hkv}, count[3] = {H, Hkv, Hkv};
    // positions (B, T), or (T) shared by the batch (row stride 0); I64 or I32.
    const int64_t pos_stride = positions.dim() == 2 ? T : 0;
    const bool pos64 = positions.dtype() == DType::I64;
    const int64_t* pp64 = pos64 ? positions.data<int64_t>() : nullptr;
    const int32_t* pp32 = pos64 ? nullptr : positions.data<int32_t>();
    const T_* pf = inv_freq.data<T_>();  // (D/2)
    const T_ sign = to_heads ? T_(1) : T_(-1);
#pragma omp parallel for collapse(2) schedule(static)
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < T; ++t) {
        const int64_t kpos = b * pos_stride + t;
        const T_ position = static_cast<T_>(pos64 ? pp64[kpos] : pp32[kpos]);
        for (int which = 0; which < 3; ++which)
          for (int64_t h = 0; h < count[which]; ++h) {
            T_* row = pp + ((b * T + t) * heads + first[which] + h) * D;  // (D) of packed
            const Tensor& part = *parts[which];
            // (D) of the part's (B, heads, T, D), or none (a gradient that did not arrive)
            T_* head =
                part.defined() ? part.data<T_>() + ((b * count[which] + h) * T + t) * D : nullptr;
            const T_* src = to_heads ? row : head;
            T_* dst = to_heads ? head : row;
            if (src == nullptr) {
              for (int64_t i = 0; i < D; ++i) dst[i] = T_(0);
              continue;
            }
            if (which == 2) {  // values: moved, not turned
              for (int64_t i = 0; i < D; ++i) dst[i] = src[i];
              continue;
            }
            cpu_detail::rope_rotate_row(src, dst, half, position, pf, sign);
          }
      }
  });
}

}  // namespace microllm::ops
