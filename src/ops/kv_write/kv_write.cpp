// kv_write: validation (shapes, dtypes, devices, row layout) and dispatch. Inference only:
// nothing is recorded for autograd and nothing is allocated.
#include "microllm/ops/kv_write.h"

#include "../common.h"
#include "kv_cache_checks.h"
#include "kv_write_kernels.h"

namespace microllm::ops {

void kv_write(const Tensor& k, const Tensor& v, const Tensor& slot_mapping, const Tensor& k_cache,
              const Tensor& v_cache) {
  constexpr const char* kOp = "kv_write";
  detail::check_kv_cache(kOp, k_cache, v_cache);
  const Device device = k_cache.device();
  detail::check_floating(kOp, k, "k");
  detail::check_floating(kOp, v, "v");
  detail::check_same_dtype(kOp, k, "k", v, "v");
  detail::check_same_device(kOp, k, "k", k_cache, "k_cache");
  detail::check_same_device(kOp, v, "v", k_cache, "k_cache");
  detail::check_rank(kOp, k, "k", 3);
  detail::check_rank(kOp, v, "v", 3);
  const int64_t N = k.size(0), Hkv = k_cache.size(2), D = k_cache.size(3);
  MICROLLM_CHECK(k.shape() == v.shape() && k.size(1) == Hkv && k.size(2) == D, kOp,
                 "expected k, v (N, Hkv, D) = (N, ", Hkv, ", ", D, ") to match the cache ",
                 k_cache.describe(), ", found k ", k.describe(), " and v ", v.describe());
  MICROLLM_CHECK(!(device.is_cuda() && k.dtype() == DType::F64), kOp,
                 "CUDA kernels take f32, bf16 or f16, found k ", k.describe());
  detail::check_step_ids(kOp, slot_mapping, "slot_mapping", 1, device);
  MICROLLM_CHECK(slot_mapping.size(0) == N, kOp, "slot_mapping must be (N) = (", N, "), found ",
                 slot_mapping.describe(), " for k ", k.describe());
  const KvWriteShape shape{N,
                           Hkv,
                           D,
                           k_cache.size(0),
                           k_cache.size(1),
                           detail::dense_row_stride(kOp, k, "k"),
                           detail::dense_row_stride(kOp, v, "v")};
  if (N == 0) return;
  MICROLLM_KERNEL(device, kv_write, shape, k, v, slot_mapping, k_cache, v_cache);
}

}  // namespace microllm::ops
