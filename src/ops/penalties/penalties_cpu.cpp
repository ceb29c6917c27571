// CPU reference of apply_penalties. Per row: the history's sort keys (id·2 + [generated])
// into the workspace, std::sort, then one update per run of equal ids — each distinct id
// once, its generated entries counted at the end of its run. References: transformers'
// RepetitionPenaltyLogitsProcessor; vLLM's frequency / presence penalties (OpenAI's API).
// Each floating-point step must round once, as the device's _rn intrinsics do
// (penalty_math.h): no contraction into fused multiply-adds where the target has them
// (aarch64, -march=native).
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include <algorithm>
#include <bit>
#include <cstdint>

#include "penalties_kernels.h"
#include "penalty_math.h"

namespace microllm::ops {

void apply_penalties_cpu(const Tensor& logits, const Tensor& history, const Tensor& prompt_lens,
                         const PenaltyTensors& penalties, const Tensor& workspace) {
  using namespace penalty_math;
  const int64_t batch = logits.size(0), vocab = logits.size(1), length = history.size(1);
  const int64_t padded = static_cast<int64_t>(std::bit_ceil(static_cast<uint64_t>(length)));
  float* all_logits = logits.data<float>();                                     // (B, V)
  const int32_t* ids = history.data<int32_t>();                                 // (B, L)
  const int32_t* prompt = prompt_lens.data<int32_t>();                          // (B)
  const float* repetition = penalties.repetition.data<float>();                 // (B)
  const float* frequency = penalties.frequency.data<float>();                   // (B)
  const float* presence = penalties.presence.data<float>();                     // (B)
  uint32_t* all_keys = reinterpret_cast<uint32_t*>(workspace.data<uint8_t>());  // (B, padded)
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < batch; ++b) {
    uint32_t* keys = all_keys + b * padded;
    for (int64_t j = 0; j < length; ++j)
      keys[j] = history_key(ids[b * length + j], j >= prompt[b], vocab);
    std::sort(keys, keys + length);
    float* row = all_logits + b * vocab;
    for (int64_t j = 0; j < length && keys[j] != kInvalidKey;) {
      const uint32_t id = keys[j] >> 1;
      int64_t generated = 0;
      for (; j < length && (keys[j] >> 1) == id && keys[j] != kInvalidKey; ++j)
        generated += keys[j] & 1u;
      row[id] = penalized(row[id], repetition[b], frequency[b], presence[b], generated);
    }
  }
}

}  // namespace microllm::ops
