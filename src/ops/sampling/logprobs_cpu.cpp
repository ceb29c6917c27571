// CPU reference of logprobs: log_softmax of the row (max subtracted, the sum of exponentials
// in F64) at the sampled id, and the N largest entries, larger first, lower id first on
// ties, found by N scans that each take the best entry ranked after the previous one.
#include <cmath>
#include <cstdint>
#include <limits>

#include "microllm/core/float_convert.h"
#include "sampling_kernels.h"
#include "sampling_math.h"

namespace microllm::ops {

void logprobs_rows_cpu(const Tensor& logits, const Tensor& ids, const Tensor& out_logprobs,
                       const Tensor& top_ids, const Tensor& top_logprobs) {
  using sampling_math::kNoId;
  using sampling_math::ranks_above;
  const int64_t batch = logits.size(0), vocab = logits.size(1);
  const int64_t n = top_ids.defined() ? top_ids.size(1) : 0;
  const bool bf16 = logits.dtype() == DType::BF16;
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < batch; ++b) {
    auto value = [&](int64_t i) {
      return bf16 ? bf16_bits_to_f32(logits.data<uint16_t>()[b * vocab + i])
                  : logits.data<float>()[b * vocab + i];
    };
    float row_max = -INFINITY;
    for (int64_t i = 0; i < vocab; ++i) row_max = std::max(row_max, value(i));
    double total = 0.0;
    for (int64_t i = 0; i < vocab; ++i) total += std::exp(static_cast<double>(value(i)) - row_max);
    const double log_total = static_cast<double>(row_max) + std::log(total);
    auto logprob = [&](int64_t i) { return static_cast<float>(value(i) - log_total); };

    const int32_t id = ids.data<int32_t>()[b];
    out_logprobs.data<float>()[b] =
        id >= 0 && id < vocab ? logprob(id) : std::numeric_limits<float>::quiet_NaN();
    // Round r takes the best entry ranked after round r − 1's pick.
    float prev_v = INFINITY;
    int32_t prev_id = -1;
    for (int64_t r = 0; r < n; ++r) {
      float best = -INFINITY;
      int32_t best_id = kNoId;
      for (int64_t i = 0; i < vocab; ++i) {
        const float v = value(i);
        const int32_t vi = static_cast<int32_t>(i);
        if (ranks_above(prev_v, prev_id, v, vi) && ranks_above(v, vi, best, best_id)) {
          best = v;
          best_id = vi;
        }
      }
      top_ids.data<int32_t>()[b * n + r] = best_id == kNoId ? -1 : best_id;
      top_logprobs.data<float>()[b * n + r] = best_id == kNoId ? -INFINITY : logprob(best_id);
      prev_v = best;
      prev_id = best_id;
    }
  }
}

}  // namespace microllm::ops
