// rope_kv_write: validation and dispatch (see kv_write.h). The CPU path is the composition
// of the ops it fuses, so it is the reference by construction.
#include "../common.h"
#include "kv_cache_checks.h"
#include "kv_write_kernels.h"
#include "microllm/ops/cast.h"
#include "microllm/ops/kv_write.h"
#include "microllm/ops/rope.h"

namespace microllm::ops {

void rope_kv_write(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& positions,
                   const Tensor& inv_freq, const Tensor& slot_mapping, const Tensor& q_out,
                   const Tensor& k_out, const Tensor& k_cache, const Tensor& v_cache) {
  constexpr const char* kOp = "rope_kv_write";
  detail::check_kv_cache(kOp, k_cache, v_cache);
  const Device device = k_cache.device();
  detail::check_floating(kOp, q, "q");
  detail::check_same_dtype(kOp, q, "q", k, "k");
  detail::check_same_dtype(kOp, q, "q", v, "v");
  for (const auto& [t, name] : {std::pair{&q, "q"}, {&k, "k"}, {&v, "v"}}) {
    detail::check_same_device(kOp, *t, name, k_cache, "k_cache");
    detail::check_rank(kOp, *t, name, 3);
  }
  const int64_t N = q.size(0), H = q.size(1), Hkv = k_cache.size(2), D = k_cache.size(3);
  MICROLLM_CHECK(q.size(2) == D && k.shape() == v.shape() && k.size(0) == N && k.size(1) == Hkv &&
                     k.size(2) == D && D % 2 == 0,
                 kOp, "expected q (N, H, D), k, v (N, Hkv, D) with the cache's Hkv = ", Hkv,
                 " and even D = ", D, ", found q ", q.describe(), ", k ", k.describe(), ", v ",
                 v.describe());
  detail::check_out_tensor(kOp, q_out, "q_out", q, "q");
  detail::check_out_tensor(kOp, k_out, "k_out", q, "q");
  detail::check_out_shape(kOp, q_out, "q_out", q, "q");
  detail::check_out_shape(kOp, k_out, "k_out", k, "k");
  detail::check_apart_or_same(kOp, q_out, "q_out", q, "q");
  detail::check_apart_or_same(kOp, k_out, "k_out", k, "k");
  detail::check_apart(kOp, k_out, "k_out", v, "v");
  detail::check_apart(kOp, q_out, "q_out", k_out, "k_out");
  detail::check_step_ids(kOp, positions, "positions", 1, device);
  detail::check_step_ids(kOp, slot_mapping, "slot_mapping", 1, device);
  MICROLLM_CHECK(positions.size(0) == N && slot_mapping.size(0) == N, kOp,
                 "positions and slot_mapping must be (N) = (", N, "), found ", positions.describe(),
                 " and ", slot_mapping.describe());
  if (device.is_cpu()) {
    // The ops this one fuses, in order (each validates the rest).
    const Tensor pos = positions.view({N, 1});  // (N, 1): T = 1 per row
    const auto same = [](const Tensor& a, const Tensor& b) {
      return a.storage() == b.storage() && a.offset() == b.offset() && a.is_contiguous();
    };
    if (!same(q_out, q)) cast_out(q, q_out);  // in place: already there
    if (!same(k_out, k)) cast_out(k, k_out);
    rope_out(q_out.view({N, H, 1, D}), pos, inv_freq, q_out.view({N, H, 1, D}));
    rope_out(k_out.view({N, Hkv, 1, D}), pos, inv_freq, k_out.view({N, Hkv, 1, D}));
    kv_write(k_out, v, slot_mapping, k_cache, v_cache);
    return;
  }
  MICROLLM_CHECK(q.dtype() != DType::F64, kOp, "CUDA kernels take f32, bf16 or f16, found q ",
                 q.describe());
  MICROLLM_CHECK(inv_freq.defined() && inv_freq.dtype() == DType::F32 && inv_freq.dim() == 1 &&
                     inv_freq.size(0) == D / 2 && inv_freq.is_contiguous() &&
                     inv_freq.device() == device,
                 kOp, "inv_freq must be dense (D/2) = (", D / 2, ") f32 on ", device, ", found ",
                 inv_freq.describe());
  if (N == 0) return;
#if MICROLLM_WITH_CUDA
  const RopeKvWriteShape shape{N,
                               H,
                               Hkv,
                               D,
                               detail::dense_row_stride(kOp, q, "q"),
                               detail::dense_row_stride(kOp, k, "k"),
                               detail::dense_row_stride(kOp, v, "v")};
  rope_kv_write_cuda(shape, q, k, v, positions, inv_freq, slot_mapping, q_out, k_out, k_cache,
                     v_cache);
#endif
}

}  // namespace microllm::ops
