// Element type sizes and names.
#include "microllm/core/dtype.h"

#include "microllm/core/error.h"

namespace microllm {

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::F64:
    case DType::I64:
      return 8;
    case DType::F32:
    case DType::I32:
      return 4;
    case DType::F16:
    case DType::BF16:
      return 2;
    case DType::F8E4M3:
    case DType::F8E5M2:
    case DType::I8:
    case DType::U8:
    case DType::Bool:
      return 1;
  }
  MICROLLM_FAIL("dtype", "unknown dtype code ", static_cast<int>(dtype));
}

std::string_view dtype_name(DType dtype) {
  switch (dtype) {
    case DType::F64:
      return "f64";
    case DType::F32:
      return "f32";
    case DType::F16:
      return "f16";
    case DType::BF16:
      return "bf16";
    case DType::F8E4M3:
      return "f8e4m3";
    case DType::F8E5M2:
      return "f8e5m2";
    case DType::I64:
      return "i64";
    case DType::I32:
      return "i32";
    case DType::I8:
      return "i8";
    case DType::U8:
      return "u8";
    case DType::Bool:
      return "bool";
  }
  return "unknown";
}

DType dtype_from_name(std::string_view name) {
  for (DType dtype : kAllDTypes)
    if (name == dtype_name(dtype)) return dtype;
  struct Alias {
    std::string_view name;
    DType dtype;
  };
  static constexpr Alias kAliases[] = {
      {"float64", DType::F64},       {"float32", DType::F32}, {"float16", DType::F16},
      {"bfloat16", DType::BF16},     {"int64", DType::I64},   {"int32", DType::I32},
      {"int8", DType::I8},           {"uint8", DType::U8},    {"float8_e4m3fn", DType::F8E4M3},
      {"float8_e5m2", DType::F8E5M2}};
  for (const Alias& alias : kAliases)
    if (name == alias.name) return alias.dtype;
  MICROLLM_FAIL("dtype", "unknown dtype name '", name,
                "' (expected f64, f32, f16, bf16, f8e4m3, f8e5m2, i64, i32, i8, u8 or bool)");
}

bool is_floating(DType dtype) {
  switch (dtype) {
    case DType::F64:
    case DType::F32:
    case DType::F16:
    case DType::BF16:
    case DType::F8E4M3:
    case DType::F8E5M2:
      return true;
    default:
      return false;
  }
}

bool is_integral(DType dtype) { return !is_floating(dtype); }

std::ostream& operator<<(std::ostream& out, DType dtype) { return out << dtype_name(dtype); }

}  // namespace microllm
