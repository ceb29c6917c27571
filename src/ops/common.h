// Shared by operator implementations: argument checks that throw one clear Error, and the
// dtype dispatch of CPU kernels.
//
// CPU kernels are written once as templates over float and double. Inputs in BF16/F16
// are widened to F32 at the operator's entry (cpu_operand) and results narrowed back, so
// the CPU path is the F32 (or F64) numerical reference for every floating dtype.
#pragma once

#include <string>

#include "microllm/core/error.h"
#include "microllm/core/tensor.h"

namespace microllm::ops::detail {

inline void check_defined(const char* op, const Tensor& t, const char* name) {
  MICROLLM_CHECK(t.defined(), op, "argument '", name, "' is undefined");
}

inline void check_floating(const char* op, const Tensor& t, const char* name) {
  check_defined(op, t, name);
  MICROLLM_CHECK(t.dtype() == DType::F32 || t.dtype() == DType::F64 ||
                     t.dtype() == DType::BF16 || t.dtype() == DType::F16,
                 op, "argument '", name, "' must be f32, f64, bf16 or f16, found ", t.describe());
}

inline void check_index(const char* op, const Tensor& t, const char* name) {
  check_defined(op, t, name);
  MICROLLM_CHECK(t.dtype() == DType::I64 || t.dtype() == DType::I32, op, "argument '", name,
                 "' must be i32 or i64, found ", t.describe());
}

inline void check_same_device(const char* op, const Tensor& a, const char* a_name,
                              const Tensor& b, const char* b_name) {
  MICROLLM_CHECK(a.device() == b.device(), op, "'", a_name, "' ", a.describe(), " and '", b_name,
                 "' ", b.describe(), " are on different devices");
}

inline void check_same_dtype(const char* op, const Tensor& a, const char* a_name, const Tensor& b,
                             const char* b_name) {
  MICROLLM_CHECK(a.dtype() == b.dtype(), op, "'", a_name, "' ", a.describe(), " and '", b_name,
                 "' ", b.describe(), " have different dtypes");
}

inline void check_rank(const char* op, const Tensor& t, const char* name, int64_t rank) {
  MICROLLM_CHECK(t.dim() == rank, op, "argument '", name, "' must have rank ", rank, ", found ",
                 t.describe());
}

// Operators run on the device of their inputs; until the CUDA kernels exist, a CUDA input
// is a clear error rather than a silent host round trip.
inline void check_cpu(const char* op, const Tensor& t) {
  MICROLLM_CHECK(t.is_cpu(), op, "no kernel for device ", t.device(), " (input ", t.describe(), ")");
}

// Dense F32/F64 view of a floating tensor for a CPU kernel (BF16/F16 widened to F32).
inline Tensor cpu_operand(const Tensor& t) {
  if (t.dtype() == DType::BF16 || t.dtype() == DType::F16) return t.to(DType::F32).contiguous();
  return t.contiguous();
}

// The dtype a CPU kernel computes in for an input of `dtype`.
inline DType cpu_compute_dtype(DType dtype) { return dtype == DType::F64 ? DType::F64 : DType::F32; }

// Calls fn(T{}) with T = double for F64 and float for every other floating dtype.
template <class Fn>
decltype(auto) dispatch_float(DType dtype, Fn&& fn) {
  if (dtype == DType::F64) return fn(double{});
  return fn(float{});
}

// Integer ids of any index dtype, as int64, on the host.
inline int64_t load_index(const Tensor& dense_index, int64_t i) {
  return dense_index.dtype() == DType::I64 ? dense_index.data<int64_t>()[i]
                                           : dense_index.data<int32_t>()[i];
}

}  // namespace microllm::ops::detail
