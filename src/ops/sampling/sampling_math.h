// The sampler's arithmetic, shared by the CPU reference and the CUDA kernels so both get the
// same bits: the temperature-scaled logit, exp on (−∞, 0], fixed-point probability masses,
// order-preserving keys and the (value, lower id) ranking. docs/sampling.md explains why.
//
// Every floating-point step is one correctly rounded IEEE operation: on the device through
// the _rn intrinsics, which nvcc never contracts into fused multiply-adds; fused steps are
// explicit fmas on both sides (std::fma on the host). The CPU files that include this
// header switch contraction off (#pragma), so their plain `*` and `-` round once each too,
// on targets with FMA instructions as well (aarch64, -march=native).
//
// Masses are integers, Q = ⌊exp(x − max) · 2⁴³⌋ ≤ 2⁴³, so sums over a vocabulary of up to
// 2²⁰ tokens stay below 2⁶³ and are exact in any order: the kept set and the drawn token do
// not depend on how a kernel splits its reductions.
#pragma once

#include <bit>
#include <climits>
#include <cmath>
#include <cstdint>

#include "microllm/core/host_device.h"

namespace microllm::ops::sampling_math {

inline constexpr float kMassScale = 0x1p43f;  // Q = ⌊e · 2⁴³⌋
inline constexpr int32_t kNoId = INT32_MAX;   // "no token yet" in the argmax

MICROLLM_HOST_DEVICE inline float fma_rn(float a, float b, float c) {
#if MICROLLM_DEVICE_CODE
  return __fmaf_rn(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}

MICROLLM_HOST_DEVICE inline float mul_rn(float a, float b) {
#if MICROLLM_DEVICE_CODE
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}

MICROLLM_HOST_DEVICE inline float div_rn(float a, float b) {
#if MICROLLM_DEVICE_CODE
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}

MICROLLM_HOST_DEVICE inline float sub_rn(float a, float b) {
#if MICROLLM_DEVICE_CODE
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}

MICROLLM_HOST_DEVICE inline float round_to_even(float v) {
#if MICROLLM_DEVICE_CODE
  return rintf(v);
#else
  return std::nearbyint(v);  // the default rounding mode: to nearest, ties to even
#endif
}

MICROLLM_HOST_DEVICE inline uint32_t float_bits(float v) {
#if MICROLLM_DEVICE_CODE
  return __float_as_uint(v);
#else
  return std::bit_cast<uint32_t>(v);
#endif
}

MICROLLM_HOST_DEVICE inline float bits_float(uint32_t bits) {
#if MICROLLM_DEVICE_CODE
  return __uint_as_float(bits);
#else
  return std::bit_cast<float>(bits);
#endif
}

MICROLLM_HOST_DEVICE inline double to_double(uint64_t v) {
#if MICROLLM_DEVICE_CODE
  return __ull2double_rn(v);
#else
  return static_cast<double>(v);
#endif
}

// x = logit / temperature (TemperatureLogitsWarper), with −0 made +0 so equal values have
// one key.
MICROLLM_HOST_DEVICE inline float scaled_logit(float logit, float temperature) {
  const float x = div_rn(logit, temperature);
  return x == 0.0f ? 0.0f : x;
}

// exp(d) for d ≤ 0 within 2 ulp, the same bits on host and device; 0 below −86.5 (so every
// nonzero result is a normal number: flushing subnormals cannot change it), for −∞ and NaN.
// d = k·ln2 + r with k = round(d·log2 e), r reduced in two steps (ln2 split into a head with
// trailing zero bits and a tail), then the degree-7 Taylor polynomial of exp(r) (|r| ≤ 0.35:
// truncation below 0.1 ulp) times 2^k.
MICROLLM_HOST_DEVICE inline float exp_nonpositive(float d) {
  if (!(d >= -86.5f)) return 0.0f;
  constexpr float kLog2e = 1.44269504f;
  constexpr float kLn2Head = 0x1.62e400p-1f;         // 0.693145751953125, 8 trailing zero bits
  constexpr float kLn2Tail = 0x1.7f7d1cp-20f;        // ln 2 − head
  const float k = round_to_even(mul_rn(d, kLog2e));  // in [−125, 0]
  float r = fma_rn(k, -kLn2Head, d);
  r = fma_rn(k, -kLn2Tail, r);
  float p = 1.0f / 5040.0f;
  p = fma_rn(p, r, 1.0f / 720.0f);
  p = fma_rn(p, r, 1.0f / 120.0f);
  p = fma_rn(p, r, 1.0f / 24.0f);
  p = fma_rn(p, r, 1.0f / 6.0f);
  p = fma_rn(p, r, 0.5f);
  p = fma_rn(p, r, 1.0f);
  p = fma_rn(p, r, 1.0f);
  const float two_k = bits_float(static_cast<uint32_t>(static_cast<int32_t>(k) + 127) << 23);
  return mul_rn(p, two_k);
}

// The fixed-point mass of a token with e = exp(x − max) ∈ [0, 1].
MICROLLM_HOST_DEVICE inline uint64_t mass_of(float e) {
  return static_cast<uint64_t>(mul_rn(e, kMassScale));
}

// Unsigned key with key(a) < key(b) ⇔ a < b for non-NaN floats (−0 and +0 differ: callers
// pass values from scaled_logit, where −0 is gone).
MICROLLM_HOST_DEVICE inline uint32_t order_key(float x) {
  const uint32_t bits = float_bits(x);
  return (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
}

MICROLLM_HOST_DEVICE inline float key_value(uint32_t key) {
  return bits_float((key & 0x80000000u) ? (key & 0x7fffffffu) : ~key);
}

// The sampling order: a larger value first, between equal values the lower id first.
// NaN never ranks above anything.
MICROLLM_HOST_DEVICE inline bool ranks_above(float v, int32_t id, float other_v, int32_t other_id) {
  return v > other_v || (v == other_v && id < other_id);
}

// Top-p keeps a token while the mass ranked above it is below top_p · (mass of the top-k
// set), compared in F64: threshold = rn(top_p · rn(total)).
MICROLLM_HOST_DEVICE inline double top_p_threshold(float top_p, uint64_t total) {
#if MICROLLM_DEVICE_CODE
  return __dmul_rn(static_cast<double>(top_p), to_double(total));
#else
  return static_cast<double>(top_p) * to_double(total);
#endif
}

MICROLLM_HOST_DEVICE inline bool below_threshold(uint64_t mass_above, double threshold) {
  return to_double(mass_above) < threshold;
}

// A kept token's renormalized probability, rn(rn(q) / rn(total)) rounded to F32.
MICROLLM_HOST_DEVICE inline float probability(uint64_t q, uint64_t total) {
#if MICROLLM_DEVICE_CODE
  return __double2float_rn(__ddiv_rn(to_double(q), to_double(total)));
#else
  return static_cast<float>(to_double(q) / to_double(total));
#endif
}

// Which tokens of a sampled row survive top-k, top-p and min-p, as thresholds on the key of
// x = scaled_logit(...) (both devices compute this form; the CPU derives it from a sort).
struct KeepRule {
  float max = 0.0f;    // the row's largest x
  uint32_t key_k = 0;  // top-k: keep key ≥ key_k (0 keeps every value)
  uint32_t key_p = 0;  // top-p: keep key > key_p, or key == key_p and id < id_cut
  int64_t id_cut = INT64_MAX;
  float min_p = 0.0f;  // min-p: keep exp(x − max) ≥ min_p

  MICROLLM_HOST_DEVICE bool kept(float x, int64_t id, float e) const {
    const uint32_t key = order_key(x);
    return key >= key_k && (key > key_p || (key == key_p && id < id_cut)) && e >= min_p;
  }
};

}  // namespace microllm::ops::sampling_math
