// The rotation of one RoPE row on the CPU, shared by rope_cpu.cpp and rope_qkv_heads_cpu.cpp
// so both give the same bits: pair (i, i + half) of x turned by θ = position · inv_freq[i]
// (−θ when sign is −1), in the compute dtype T (F32 or F64). y may be x.
#pragma once

#include <cmath>
#include <cstdint>

namespace microllm::ops::cpu_detail {

template <class T>
void rope_rotate_row(const T* x, T* y, int64_t half, T position, const T* inv_freq, T sign) {
  for (int64_t i = 0; i < half; ++i) {
    const T angle = position * inv_freq[i];
    const T c = std::cos(angle), s = sign * std::sin(angle);
    const T x1 = x[i], x2 = x[i + half];
    y[i] = x1 * c - x2 * s;
    y[i + half] = x2 * c + x1 * s;
  }
}

}  // namespace microllm::ops::cpu_detail
