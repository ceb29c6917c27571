// Conversions between F32 and the narrow floating formats, bit-exact and round-to-nearest-even.
//
// BF16: top 16 bits of an IEEE binary32, rounded to nearest even; NaN stays a quiet NaN.
// F16:  IEEE binary16 with subnormals; overflow gives infinity (as IEEE rounding requires).
// FP8:  OCP 8-bit formats. E4M3 ("fn": no infinities, max 448, NaN = S.1111.111) and
//       E5M2 (IEEE-like, max finite 57344). Both conversions saturate: values beyond the
//       largest finite number (infinities included) become ±max, NaN stays NaN.
#pragma once

#include <bit>
#include <cstdint>

namespace microllm {

inline float bf16_bits_to_f32(uint16_t bits) {
  return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16);
}

inline uint16_t f32_to_bf16_bits(float value) {
  uint32_t u = std::bit_cast<uint32_t>(value);
  if ((u & 0x7fffffffu) > 0x7f800000u)
    return static_cast<uint16_t>((u >> 16) | 0x0040u);  // quiet NaN
  // Add half an ulp of BF16, plus one if the kept part is odd (ties to even), then truncate.
  uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>((u + rounding) >> 16);
}

float f16_bits_to_f32(uint16_t bits);
uint16_t f32_to_f16_bits(float value);

float fp8_e4m3_to_f32(uint8_t bits);
uint8_t f32_to_fp8_e4m3(float value);
float fp8_e5m2_to_f32(uint8_t bits);
uint8_t f32_to_fp8_e5m2(float value);

}  // namespace microllm
