// Reading and writing one element of any dtype as a double — the slow, general path used by
// copies between dtypes, host access and tests. Hot loops use typed pointers instead.
#pragma once

#include <cstdint>
#include <cstring>

#include "microllm/core/dtype.h"
#include "microllm/core/float_convert.h"

namespace microllm {

inline double load_element(const void* base, int64_t index, DType dtype) {
  switch (dtype) {
    case DType::F64:
      return static_cast<const double*>(base)[index];
    case DType::F32:
      return static_cast<const float*>(base)[index];
    case DType::F16:
      return f16_bits_to_f32(static_cast<const uint16_t*>(base)[index]);
    case DType::BF16:
      return bf16_bits_to_f32(static_cast<const uint16_t*>(base)[index]);
    case DType::F8E4M3:
      return fp8_e4m3_to_f32(static_cast<const uint8_t*>(base)[index]);
    case DType::F8E5M2:
      return fp8_e5m2_to_f32(static_cast<const uint8_t*>(base)[index]);
    case DType::I64:
      return static_cast<double>(static_cast<const int64_t*>(base)[index]);
    case DType::I32:
      return static_cast<const int32_t*>(base)[index];
    case DType::I8:
      return static_cast<const int8_t*>(base)[index];
    case DType::U8:
      return static_cast<const uint8_t*>(base)[index];
    case DType::Bool:
      return static_cast<const uint8_t*>(base)[index] != 0 ? 1.0 : 0.0;
  }
  return 0.0;
}

// Floating targets round to nearest even; the narrow formats are reached through F32, so a
// F64 source is rounded twice (F64 → F32 → narrow). Integer targets truncate toward zero as
// a C cast does. Integer-to-integer copies do not come through here (see copy_from).
inline void store_element(void* base, int64_t index, DType dtype, double value) {
  switch (dtype) {
    case DType::F64:
      static_cast<double*>(base)[index] = value;
      return;
    case DType::F32:
      static_cast<float*>(base)[index] = static_cast<float>(value);
      return;
    case DType::F16:
      static_cast<uint16_t*>(base)[index] = f32_to_f16_bits(static_cast<float>(value));
      return;
    case DType::BF16:
      static_cast<uint16_t*>(base)[index] = f32_to_bf16_bits(static_cast<float>(value));
      return;
    case DType::F8E4M3:
      static_cast<uint8_t*>(base)[index] = f32_to_fp8_e4m3(static_cast<float>(value));
      return;
    case DType::F8E5M2:
      static_cast<uint8_t*>(base)[index] = f32_to_fp8_e5m2(static_cast<float>(value));
      return;
    case DType::I64:
      static_cast<int64_t*>(base)[index] = static_cast<int64_t>(value);
      return;
    case DType::I32:
      static_cast<int32_t*>(base)[index] = static_cast<int32_t>(value);
      return;
    case DType::I8:
      static_cast<int8_t*>(base)[index] = static_cast<int8_t>(value);
      return;
    case DType::U8:
      static_cast<uint8_t*>(base)[index] = static_cast<uint8_t>(value);
      return;
    case DType::Bool:
      static_cast<uint8_t*>(base)[index] = value != 0.0 ? 1 : 0;
      return;
  }
}

}  // namespace microllm
