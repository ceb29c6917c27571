// CPU counter_random: out[b, v] ← the counter-based draw of (seeds[b], positions[b], v),
// as bits (I64) or uniforms (F32, F64), from core/counter_rng.h.
#include <cstdint>

#include "microllm/core/counter_rng.h"
#include "sampling_kernels.h"

namespace microllm::ops {

void counter_random_cpu(const Tensor& seeds, const Tensor& positions, const Tensor& out) {
  const int64_t batch = out.size(0), lanes = out.size(1);
  for (int64_t b = 0; b < batch; ++b) {
    const uint64_t seed = static_cast<uint64_t>(seeds.data<int64_t>()[b]);
    const uint64_t position = positions.dtype() == DType::I64
                                  ? static_cast<uint64_t>(positions.data<int64_t>()[b])
                                  : static_cast<uint64_t>(int64_t{positions.data<int32_t>()[b]});
    for (int64_t v = 0; v < lanes; ++v) {
      const uint64_t lane = static_cast<uint64_t>(v);
      const int64_t at = b * lanes + v;
      if (out.dtype() == DType::I64)
        out.data<int64_t>()[at] = static_cast<int64_t>(counter_u64(seed, position, lane));
      else if (out.dtype() == DType::F32)
        out.data<float>()[at] = counter_uniform_f32(seed, position, lane);
      else
        out.data<double>()[at] = counter_uniform_f64(seed, position, lane);
    }
  }
}

}  // namespace microllm::ops
