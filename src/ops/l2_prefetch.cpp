// L2Prefetch (see l2_prefetch.h): the argument check and the cache size.
#include "microllm/ops/l2_prefetch.h"

#include "common.h"
#if MICROLLM_WITH_CUDA
#include "microllm/cuda/runtime.h"
#endif

namespace microllm::ops {

int64_t l2_cache_bytes(Device device) {
#if MICROLLM_WITH_CUDA
  if (device.is_cuda()) return cuda::l2_cache_bytes(device);
#endif
  (void)device;
  return 0;
}

namespace detail {

void check_l2_prefetch(const char* op, const L2Prefetch& prefetch, Device device) {
  for (const Tensor& part : prefetch.parts) {
    if (!part.defined()) continue;
    MICROLLM_CHECK(part.is_contiguous() && part.device() == device, op,
                   "an L2 prefetch part must be a dense tensor on ", device, ", found ",
                   part.describe());
  }
}

}  // namespace detail
}  // namespace microllm::ops
