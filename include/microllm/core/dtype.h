// Element types of tensors, their sizes and names.
#pragma once

#include <cstddef>
#include <cstdint>
#include <ostream>
#include <string>
#include <string_view>

namespace microllm {

// F64 exists for the CPU reference and the finite-difference gradient checks.
enum class DType : uint8_t { F64, F32, F16, BF16, F8E4M3, F8E5M2, I64, I32, I8, U8, Bool };

constexpr DType kAllDTypes[] = {DType::F64,    DType::F32,    DType::F16, DType::BF16,
                                DType::F8E4M3, DType::F8E5M2, DType::I64, DType::I32,
                                DType::I8,     DType::U8,     DType::Bool};

// Bytes per element.
size_t dtype_size(DType dtype);
// Lower-case name used in messages and files: "f32", "bf16", "f8e4m3", "i64", "bool", ...
std::string_view dtype_name(DType dtype);
// Parses dtype_name's output (also accepts "float32", "bfloat16", "float16", "int64", ...).
DType dtype_from_name(std::string_view name);
bool is_floating(DType dtype);
bool is_integral(DType dtype);  // I8..I64, U8 and Bool

std::ostream& operator<<(std::ostream& out, DType dtype);

}  // namespace microllm
