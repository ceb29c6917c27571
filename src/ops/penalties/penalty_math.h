// The penalty arithmetic shared by the CPU and CUDA kernels of apply_penalties: the history
// sort key and the update of one logit, each step one correctly rounded F32 operation (the
// _rn intrinsics on the device, never contracted; penalties_cpu.cpp switches contraction
// off), so both devices give the same bits.
#pragma once

#include <cstdint>

#include "microllm/core/host_device.h"

namespace microllm::ops::penalty_math {

inline constexpr uint32_t kInvalidKey = 0xffffffffu;  // padding and out-of-range ids

// id·2 + [generated]: sorting groups each id's prompt entries before its generated ones.
MICROLLM_HOST_DEVICE inline uint32_t history_key(int32_t id, bool generated, int64_t vocab) {
  if (id < 0 || id >= vocab) return kInvalidKey;
  return (static_cast<uint32_t>(id) << 1) | (generated ? 1u : 0u);
}

// One distinct id's logit: repetition (transformers: negative ·p, else /p), then
// frequency and presence when the id was generated (vLLM: l − f·count, then − presence).
MICROLLM_HOST_DEVICE inline float penalized(float logit, float repetition, float frequency,
                                            float presence, int64_t generated_count) {
#if MICROLLM_DEVICE_CODE
  float l = logit < 0.0f ? __fmul_rn(logit, repetition) : __fdiv_rn(logit, repetition);
  if (generated_count > 0) {
    l = __fsub_rn(l, __fmul_rn(frequency, static_cast<float>(generated_count)));
    l = __fsub_rn(l, presence);
  }
#else
  float l = logit < 0.0f ? logit * repetition : logit / repetition;
  if (generated_count > 0) {
    const float by_count = frequency * static_cast<float>(generated_count);
    l = l - by_count;
    l = l - presence;
  }
#endif
  return l;
}

}  // namespace microllm::ops::penalty_math
