// CPU reference of the KV write: a loop over the step's rows, converting each element to the
// cache dtype with the project's conversions (round to nearest even; F64 → BF16 through F32).
// Layout: k, v (N, Hkv, D) rows at k_row_stride / v_row_stride; caches (NB, BS, Hkv, D) dense,
// so slot s starts at element s·Hkv·D.
#include <cstdint>

#include "kv_write_kernels.h"
#include "microllm/core/element.h"

namespace microllm::ops {

void kv_write_cpu(const KvWriteShape& s, const Tensor& k, const Tensor& v,
                  const Tensor& slot_mapping, const Tensor& k_cache, const Tensor& v_cache) {
  const int32_t* slots = slot_mapping.data<int32_t>();
  const int64_t row = s.Hkv * s.D;  // elements of one slot
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < s.N; ++n) {
    const int64_t slot = slots[n];
    if (slot < 0) continue;  // padding row: writes nothing
    for (int64_t e = 0; e < row; ++e) {
      store_element(k_cache.raw_data(), slot * row + e, k_cache.dtype(),
                    load_element(k.raw_data(), n * s.k_row_stride + e, k.dtype()));
      store_element(v_cache.raw_data(), slot * row + e, v_cache.dtype(),
                    load_element(v.raw_data(), n * s.v_row_stride + e, v.dtype()));
    }
  }
}

}  // namespace microllm::ops
