// F16 and FP8 conversions (see float_convert.h for the formats and rounding rules).
//
// F16 works on the bits, as IEEE 754 describes binary16. The two FP8 formats share one
// encoder: scale the magnitude to an integer count of the format's quantum at that
// exponent, round that count to nearest even, then saturate.
#include "microllm/core/float_convert.h"

#include <cmath>

namespace microllm {

float f16_bits_to_f32(uint16_t bits) {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  const uint32_t exponent = (bits >> 10) & 0x1fu;
  const uint32_t mantissa = bits & 0x3ffu;
  if (exponent == 0x1f)  // infinity or NaN: keep the payload
    return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));
  if (exponent == 0) {
    // Zero or subnormal: value = mantissa · 2^-24, exact in F32.
    const float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
    return sign ? -magnitude : magnitude;
  }
  return std::bit_cast<float>(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

uint16_t f32_to_f16_bits(float value) {
  const uint32_t u = std::bit_cast<uint32_t>(value);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u)
    return sign | 0x7e00u | static_cast<uint16_t>((abs >> 13) & 0x1ffu);  // NaN
  if (abs >= 0x477ff000u) return sign | 0x7c00u;  // rounds to ≥ 65520: infinity
  const int32_t exponent = static_cast<int32_t>(abs >> 23) - 127;
  if (exponent < -14) {
    // Subnormal in F16 (or zero): count units of 2^-24 and round to nearest even.
    if (exponent < -25) return sign;                          // below half the smallest subnormal
    const uint32_t mantissa = (abs & 0x7fffffu) | 0x800000u;  // implicit one
    // value = mantissa · 2^(exponent-23) = (mantissa >> shift) units of 2^-24, shift ≥ 14.
    const int shift = -exponent - 1;
    const uint32_t kept = mantissa >> shift;
    const uint32_t rest = mantissa & ((1u << shift) - 1u);
    const uint32_t half = 1u << (shift - 1);
    uint32_t result = kept;
    if (rest > half || (rest == half && (kept & 1u))) ++result;
    return sign | static_cast<uint16_t>(result);
  }
  // Normal: rebias the exponent, keep 10 mantissa bits, round to nearest even on the 13 dropped.
  uint32_t rebiased = abs - (112u << 23);
  const uint32_t rounding = 0xfffu + ((rebiased >> 13) & 1u);
  return sign | static_cast<uint16_t>((rebiased + rounding) >> 13);
}

namespace {

struct Fp8Format {
  int exponent_bits;
  int mantissa_bits;
  int bias;
  float max_finite;
  uint8_t max_bits;   // largest finite value (without sign)
  uint8_t nan_bits;   // canonical NaN (without sign)
  bool has_infinity;  // E5M2 reserves exponent 11111 for inf/NaN
};

constexpr Fp8Format kE4M3{4, 3, 7, 448.0f, 0x7e, 0x7f, false};
constexpr Fp8Format kE5M2{5, 2, 15, 57344.0f, 0x7b, 0x7e, true};

float fp8_decode(uint8_t bits, const Fp8Format& f) {
  const bool negative = bits & 0x80u;
  const int exponent = (bits >> f.mantissa_bits) & ((1 << f.exponent_bits) - 1);
  const int mantissa = bits & ((1 << f.mantissa_bits) - 1);
  const int max_exponent = (1 << f.exponent_bits) - 1;
  float magnitude;
  if (f.has_infinity && exponent == max_exponent) {
    magnitude = mantissa == 0 ? INFINITY : NAN;
  } else if (!f.has_infinity && exponent == max_exponent &&
             mantissa == (1 << f.mantissa_bits) - 1) {
    magnitude = NAN;
  } else if (exponent == 0) {
    magnitude = std::ldexp(static_cast<float>(mantissa), 1 - f.bias - f.mantissa_bits);
  } else {
    magnitude = std::ldexp(static_cast<float>(mantissa + (1 << f.mantissa_bits)),
                           exponent - f.bias - f.mantissa_bits);
  }
  return negative ? -magnitude : magnitude;
}

uint8_t fp8_encode(float value, const Fp8Format& f) {
  const uint8_t sign = std::signbit(value) ? 0x80u : 0x00u;
  if (std::isnan(value)) return sign | f.nan_bits;
  const double magnitude = std::fabs(static_cast<double>(value));
  if (magnitude >= f.max_finite) return sign | f.max_bits;  // saturate (infinities too)
  if (magnitude == 0.0) return sign;
  // The quantum (spacing) at this magnitude; subnormals share the smallest normal's spacing.
  int exponent = std::ilogb(magnitude);
  if (exponent < 1 - f.bias) exponent = 1 - f.bias;
  const double quantum = std::ldexp(1.0, exponent - f.mantissa_bits);
  const double units = std::nearbyint(magnitude / quantum);  // ties to even (default mode)
  const double rounded = units * quantum;
  if (rounded > f.max_finite) return sign | f.max_bits;
  // Re-encode the rounded magnitude (rounding may have carried into the next binade).
  if (rounded == 0.0) return sign;
  const int e = std::ilogb(rounded);
  if (e < 1 - f.bias) {  // subnormal: exponent field 0, mantissa = units of the smallest quantum
    const int mantissa = static_cast<int>(rounded / std::ldexp(1.0, 1 - f.bias - f.mantissa_bits));
    return sign | static_cast<uint8_t>(mantissa);
  }
  const int mantissa =
      static_cast<int>(rounded / std::ldexp(1.0, e - f.mantissa_bits)) - (1 << f.mantissa_bits);
  return sign | static_cast<uint8_t>(((e + f.bias) << f.mantissa_bits) | mantissa);
}

}  // namespace

float fp8_e4m3_to_f32(uint8_t bits) { return fp8_decode(bits, kE4M3); }
uint8_t f32_to_fp8_e4m3(float value) { return fp8_encode(value, kE4M3); }
float fp8_e5m2_to_f32(uint8_t bits) { return fp8_decode(bits, kE5M2); }
uint8_t f32_to_fp8_e5m2(float value) { return fp8_encode(value, kE5M2); }

}  // namespace microllm
