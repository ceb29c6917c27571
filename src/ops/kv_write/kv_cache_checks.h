// Host checks shared by the paged KV-cache operators (kv_write, paged_attention): the cache
// pair, the i32 step metadata and the row layout of token-major activations. Shapes,
// dtypes, devices and strides only; no device value is read.
#pragma once

#include <cstdint>

#include "../common.h"

namespace microllm::ops::detail {

// k_cache and v_cache: (NB, BS, Hkv, D), dense, f32 or bf16, one dtype, one shape, one device.
inline void check_kv_cache(const char* op, const Tensor& k_cache, const Tensor& v_cache) {
  check_defined(op, k_cache, "k_cache");
  check_defined(op, v_cache, "v_cache");
  check_rank(op, k_cache, "k_cache", 4);
  check_rank(op, v_cache, "v_cache", 4);
  MICROLLM_CHECK(k_cache.dtype() == DType::F32 || k_cache.dtype() == DType::BF16, op,
                 "KV caches must be f32 or bf16, found k_cache ", k_cache.describe());
  check_same_dtype(op, k_cache, "k_cache", v_cache, "v_cache");
  check_same_device(op, k_cache, "k_cache", v_cache, "v_cache");
  MICROLLM_CHECK(k_cache.shape() == v_cache.shape(), op,
                 "k_cache and v_cache must both be (NB, BS, Hkv, D), found ", k_cache.describe(),
                 " and ", v_cache.describe());
  MICROLLM_CHECK(k_cache.is_contiguous() && v_cache.is_contiguous(), op,
                 "KV caches must be dense, found strides ", shape_str(k_cache.strides()), " and ",
                 shape_str(v_cache.strides()), " for ", k_cache.describe());
  MICROLLM_CHECK(k_cache.size(1) > 0 && k_cache.size(2) > 0 && k_cache.size(3) > 0, op,
                 "KV caches need BS, Hkv and D > 0, found ", k_cache.describe());
}

// Step metadata: a dense i32 tensor of `rank` on `device`.
inline void check_step_ids(const char* op, const Tensor& t, const char* name, int64_t rank,
                           Device device) {
  check_defined(op, t, name);
  check_rank(op, t, name, rank);
  MICROLLM_CHECK(t.dtype() == DType::I32, op, "argument '", name, "' must be i32, found ",
                 t.describe());
  MICROLLM_CHECK(t.is_contiguous(), op, "argument '", name, "' must be dense, found strides ",
                 shape_str(t.strides()), " for ", t.describe());
  MICROLLM_CHECK(t.device() == device, op, "argument '", name, "' ", t.describe(),
                 " is not on the device of the KV cache (", device, ")");
}

// For t (R, A, B) whose (A, B) rows are dense (strides (row, B, 1)) and do not overlap,
// returns the row stride (elements between rows r and r+1).
inline int64_t dense_row_stride(const char* op, const Tensor& t, const char* name) {
  const int64_t A = t.size(1), Bd = t.size(2);
  const bool rows_dense = (Bd <= 1 || t.stride(2) == 1) && (A <= 1 || t.stride(1) == Bd);
  const int64_t row = t.size(0) <= 1 ? A * Bd : t.stride(0);
  MICROLLM_CHECK(rows_dense && row >= A * Bd, op, "argument '", name, "' needs dense (", A, ", ",
                 Bd, ") rows (strides (s >= ", A * Bd, ", ", Bd, ", 1)), found strides ",
                 shape_str(t.strides()), " for ", t.describe());
  return row;
}

}  // namespace microllm::ops::detail
