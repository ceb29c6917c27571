// Shared by operator implementations: argument checks that throw one clear Error, the
// operands kernels read, and the dispatch to a kernel by device and dtype.
//
// CPU kernels are written once as templates over float and double; CUDA kernels as
// templates over float, __nv_bfloat16 and __half. MICROLLM_KERNEL(device, name, args...)
// calls name_cuda(args...) for CUDA tensors and name_cpu(args...) otherwise.
#pragma once

#include <climits>
#include <cstdint>
#include <string>
#include <utility>

#include "microllm/core/error.h"
#include "microllm/core/tensor.h"

#if MICROLLM_WITH_CUDA
#define MICROLLM_KERNEL(device, name, ...) \
  ((device).is_cuda() ? name##_cuda(__VA_ARGS__) : name##_cpu(__VA_ARGS__))
#else
#define MICROLLM_KERNEL(device, name, ...) name##_cpu(__VA_ARGS__)
#endif

namespace microllm::ops::detail {

inline void check_defined(const char* op, const Tensor& t, const char* name) {
  MICROLLM_CHECK(t.defined(), op, "argument '", name, "' is undefined");
}

inline void check_floating(const char* op, const Tensor& t, const char* name) {
  check_defined(op, t, name);
  MICROLLM_CHECK(t.dtype() == DType::F32 || t.dtype() == DType::F64 || t.dtype() == DType::BF16 ||
                     t.dtype() == DType::F16,
                 op, "argument '", name, "' must be f32, f64, bf16 or f16, found ", t.describe());
}

inline void check_index(const char* op, const Tensor& t, const char* name) {
  check_defined(op, t, name);
  MICROLLM_CHECK(t.dtype() == DType::I64 || t.dtype() == DType::I32, op, "argument '", name,
                 "' must be i32 or i64, found ", t.describe());
}

inline void check_same_device(const char* op, const Tensor& a, const char* a_name, const Tensor& b,
                              const char* b_name) {
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

// The dense operand a kernel on t's device reads. CPU kernels take F32/F64 (BF16/F16 are
// widened to F32, so the CPU is the F32 reference for every dtype); CUDA kernels take
// F32/BF16/F16 as stored and compute in F32.
inline Tensor compute_operand(const Tensor& t) {
  if (t.is_cuda()) {
    MICROLLM_CHECK(t.dtype() != DType::F64, "cuda", "CUDA kernels take f32, bf16 or f16, found ",
                   t.describe());
    return t.contiguous();
  }
  if (t.dtype() == DType::BF16 || t.dtype() == DType::F16) return t.to(DType::F32).contiguous();
  return t.contiguous();
}

// Dtype of saved statistics (rstd, log-sum-exp): F64 for F64 inputs, F32 otherwise.
inline DType stat_dtype(DType dtype) { return dtype == DType::F64 ? DType::F64 : DType::F32; }

// The dtype a CPU kernel computes in for an input of `dtype`.
inline DType cpu_compute_dtype(DType dtype) {
  return dtype == DType::F64 ? DType::F64 : DType::F32;
}

// Calls fn(T{}) with T = double for F64 and float for every other floating dtype.
template <class Fn>
decltype(auto) dispatch_float(DType dtype, Fn&& fn) {
  if (dtype == DType::F64) return fn(double{});
  return fn(float{});
}

// Checks that every id in `ids` lies in [0, limit) (`skip` is allowed too, e.g. an ignore
// index) and returns how many ids are not `skip`. CUDA ids are first copied to the host:
// one counted device→host copy and synchronization per call.
// Messages read "<what> <id> at <where> <i> is outside [0, limit) (<ids>, <context>)".
int64_t check_index_range(const char* op, const Tensor& ids, int64_t limit, const char* what,
                          const char* where, const Tensor& context, int64_t skip = INT64_MIN);

// ---- the allocation-free `_out` forms ---------------------------------------------------
// These checks build no string (or anything else on the heap) unless they fail.

// A dense (row-major contiguous) operand.
inline void check_dense(const char* op, const Tensor& t, const char* name) {
  MICROLLM_CHECK(t.is_contiguous(), op, "argument '", name, "' must be dense (contiguous), found ",
                 t.describe(), " with strides ", shape_str(t.strides()));
}

// A tensor's memory seen as (rows, cols) with unit stride along the last dimension (cols its
// size) and one stride ld ≥ cols from a row to the next: a dense tensor (ld = cols), or a
// block of columns of a wider dense matrix, such as one half of a (…, 2F) projection.
struct RowLayout {
  int64_t rows, cols, ld;
};

// t's RowLayout; false when its strides are not of that form.
inline bool row_layout(const Tensor& t, RowLayout& layout) {
  const int64_t dims = t.dim();
  layout.cols = dims == 0 ? 1 : t.size(dims - 1);
  layout.rows = layout.cols == 0 ? 0 : t.numel() / layout.cols;
  layout.ld = layout.cols;
  if (dims == 0 || t.numel() == 0) return true;
  if (layout.cols > 1 && t.stride(dims - 1) != 1) return false;
  int64_t inner = -1, inner_size = 0;  // stride and size of the next non-trivial dim inwards
  for (int64_t d = dims - 2; d >= 0; --d) {
    if (t.size(d) == 1) continue;
    if (inner < 0)
      layout.ld = t.stride(d);
    else if (t.stride(d) != inner * inner_size)
      return false;
    inner = t.stride(d);
    inner_size = t.size(d);
  }
  return layout.ld >= layout.cols;
}

// An operand read as rows (RowLayout): dense, or a column block of a wider dense matrix.
inline void check_rows(const char* op, const Tensor& t, const char* name) {
  RowLayout layout{};
  MICROLLM_CHECK(row_layout(t, layout), op, "argument '", name,
                 "' must be dense or a block of columns of a dense matrix (unit stride along the "
                 "last dimension, one stride between rows), found ",
                 t.describe(), " with strides ", shape_str(t.strides()));
}

// compute_operand for kernels that read rows (RowLayout): t itself when it already is such an
// operand of the kernel's dtype (a column block of a wider matrix is read in place).
inline Tensor rows_operand(const Tensor& t) {
  RowLayout layout{};
  const bool kernel_dtype =
      t.is_cuda() ? t.dtype() != DType::F64 : t.dtype() == DType::F32 || t.dtype() == DType::F64;
  return kernel_dtype && row_layout(t, layout) ? t : compute_operand(t);
}

// The dtypes an `_out` form computes in: f32 or f64 on the CPU (no widening: the autograd
// operator widens bf16 and f16 to f32), f32, bf16 or f16 on CUDA.
inline void check_out_dtype(const char* op, const Tensor& t, const char* name) {
  check_defined(op, t, name);
  if (t.is_cuda())
    MICROLLM_CHECK(t.dtype() == DType::F32 || t.dtype() == DType::BF16 || t.dtype() == DType::F16,
                   op, "argument '", name, "' must be f32, bf16 or f16 on CUDA, found ",
                   t.describe());
  else
    MICROLLM_CHECK(t.dtype() == DType::F32 || t.dtype() == DType::F64, op, "argument '", name,
                   "' must be f32 or f64 on the CPU (", op,
                   " widens bf16 and f16; its _out form does not), found ", t.describe());
}

// `out` is preallocated: defined, dense, of `like`'s dtype and device; the shape is checked
// by the caller.
inline void check_out_tensor(const char* op, const Tensor& out, const char* name,
                             const Tensor& like, const char* like_name) {
  check_defined(op, out, name);
  MICROLLM_CHECK(out.dtype() == like.dtype() && out.device() == like.device(), op, "'", name, "' ",
                 out.describe(), " must have the dtype and device of '", like_name, "' ",
                 like.describe());
  check_dense(op, out, name);
}

// `out` has exactly `like`'s shape.
inline void check_out_shape(const char* op, const Tensor& out, const char* name, const Tensor& like,
                            const char* like_name) {
  MICROLLM_CHECK(out.shape() == like.shape(), op, "'", name, "' ", out.describe(),
                 " must have the shape of '", like_name, "' ", like.describe());
}

// `out` has the first `rank` sizes of `prefix` followed by `last`: (prefix[:rank]..., last).
inline void check_out_shape(const char* op, const Tensor& out, const char* name,
                            const Tensor& prefix, int64_t rank, int64_t last) {
  bool ok = out.dim() == rank + 1 && out.size(-1) == last;
  for (int64_t d = 0; ok && d < rank; ++d) ok = out.size(d) == prefix.size(d);
  MICROLLM_CHECK(ok, op, "'", name, "' ", out.describe(), " must have shape ", shape_str([&] {
                   Shape shape(prefix.shape().begin(), prefix.shape().begin() + rank);
                   shape.push_back(last);
                   return shape;
                 }()));
}

// The bytes [first, end) of its storage that a view can reach; empty for no elements.
inline std::pair<int64_t, int64_t> reach(const Tensor& t) {
  if (t.numel() == 0) return {0, 0};
  int64_t last = t.offset();
  for (int64_t d = 0; d < t.dim(); ++d) last += (t.shape()[d] - 1) * t.strides()[d];
  const auto width = static_cast<int64_t>(dtype_size(t.dtype()));
  return {t.offset() * width, (last + 1) * width};
}

// True when a and b may share an element (same storage, intersecting reach).
inline bool overlaps(const Tensor& a, const Tensor& b) {
  if (!a.defined() || !b.defined() || a.storage() != b.storage()) return false;
  const auto [a0, a1] = reach(a);
  const auto [b0, b1] = reach(b);
  return a0 < b1 && b0 < a1;
}

// `out` and `in` share no element.
inline void check_apart(const char* op, const Tensor& out, const char* out_name, const Tensor& in,
                        const char* in_name) {
  MICROLLM_CHECK(!overlaps(out, in), op, "'", out_name, "' ", out.describe(), " overlaps '",
                 in_name, "' ", in.describe(), "; it must be separate memory");
}

// `out` either shares no element with `in` or is the same dense memory (in place).
inline void check_apart_or_same(const char* op, const Tensor& out, const char* out_name,
                                const Tensor& in, const char* in_name) {
  const bool same = out.storage() == in.storage() && out.offset() == in.offset() &&
                    out.dtype() == in.dtype() && out.shape() == in.shape() && in.is_contiguous();
  MICROLLM_CHECK(same || !overlaps(out, in), op, "'", out_name, "' ", out.describe(),
                 " partly overlaps '", in_name, "' ", in.describe(),
                 "; it must be the same memory (in place) or separate memory");
}

// Integer ids of any index dtype, as int64, on the host.
inline int64_t load_index(const Tensor& dense_index, int64_t i) {
  return dense_index.dtype() == DType::I64 ? dense_index.data<int64_t>()[i]
                                           : dense_index.data<int32_t>()[i];
}

}  // namespace microllm::ops::detail
