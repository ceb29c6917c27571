// gemv_out: validation and dispatch of the decode projection (see matmul.h).
#include <cstdint>

#include "../common.h"
#include "../kv_write/kv_cache_checks.h"
#include "matmul_kernels.h"
#include "microllm/ops/elementwise.h"
#include "microllm/ops/kv_write.h"
#include "microllm/ops/matmul.h"
#include "microllm/ops/rms_norm.h"

namespace microllm::ops {
namespace {

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// The targets of the rope_kv_write epilogue against x (M, in) and the QKV weight; returns
// the product's width H·D + 2·Hkv·D.
int64_t check_rope_targets(const char* op, const Tensor& x, const Tensor& weight,
                           const GemvRopeKvWrite& r) {
  detail::check_kv_cache(op, r.k_cache, r.v_cache);
  detail::check_same_device(op, x, "x", r.k_cache, "k_cache");
  const int64_t M = x.size(0), Hkv = r.k_cache.size(2), D = r.k_cache.size(3);
  detail::check_out_tensor(op, r.q_out, "q_out", x, "x");
  detail::check_out_tensor(op, r.k_out, "k_out", x, "x");
  MICROLLM_CHECK(r.q_out.dim() == 3 && r.q_out.size(0) == M && r.q_out.size(2) == D &&
                     r.q_out.size(1) % Hkv == 0 && D % 2 == 0,
                 op, "q_out must be (M, H, D) = (", M, ", H, ", D,
                 ") with H a multiple of the cache's Hkv = ", Hkv, " and D even, found ",
                 r.q_out.describe());
  const int64_t H = r.q_out.size(1), width = (H + 2 * Hkv) * D;
  MICROLLM_CHECK(
      r.k_out.dim() == 3 && r.k_out.size(0) == M && r.k_out.size(1) == Hkv && r.k_out.size(2) == D,
      op, "k_out must be (", M, ", ", Hkv, ", ", D, "), found ", r.k_out.describe());
  MICROLLM_CHECK(weight.size(0) == width, op,
                 "the rope_kv_write epilogue takes the fused QKV weight (", width,
                 ", in) for H = ", H, ", Hkv = ", Hkv, ", D = ", D, ", found ", weight.describe());
  detail::check_step_ids(op, r.positions, "positions", 1, x.device());
  detail::check_step_ids(op, r.slot_mapping, "slot_mapping", 1, x.device());
  MICROLLM_CHECK(r.positions.size(0) == M && r.slot_mapping.size(0) == M, op,
                 "positions and slot_mapping must be (M) = (", M, "), found ",
                 r.positions.describe(), " and ", r.slot_mapping.describe());
  const DType freq_dtype = x.dtype() == DType::F64 ? DType::F64 : DType::F32;
  MICROLLM_CHECK(r.inv_freq.defined() && r.inv_freq.dtype() == freq_dtype &&
                     r.inv_freq.dim() == 1 && r.inv_freq.size(0) == D / 2 &&
                     r.inv_freq.is_contiguous() && r.inv_freq.device() == x.device(),
                 op, "inv_freq must be dense (D/2) = (", D / 2, ") ", dtype_name(freq_dtype),
                 " on ", x.device(), ", found ", r.inv_freq.describe());
  for (const auto& [t, name] : {std::pair{&r.q_out, "q_out"}, {&r.k_out, "k_out"}}) {
    detail::check_apart(op, *t, name, x, "x");
    detail::check_apart(op, *t, name, weight, "weight");
    detail::check_apart(op, *t, name, r.k_cache, "k_cache");
    detail::check_apart(op, *t, name, r.v_cache, "v_cache");
  }
  detail::check_apart(op, r.q_out, "q_out", r.k_out, "k_out");
  return width;
}

}  // namespace

bool gemv_supported(Device device, DType dtype, int64_t rows, int64_t in) {
  if (rows < 1 || rows > kGemvMaxRows || in < 1) return false;
  if (!device.is_cuda()) return dtype == DType::F32 || dtype == DType::F64;
  if (dtype != DType::F32 && dtype != DType::BF16 && dtype != DType::F16) return false;
  const auto per_16_bytes = static_cast<int64_t>(16 / dtype_size(dtype));
  return in % per_16_bytes == 0;
}

bool gemv_norm_supported(Device device, DType dtype, int64_t rows, int64_t in) {
  if (!gemv_supported(device, dtype, rows, in)) return false;
  if (!device.is_cuda()) return true;
  const int64_t row_bytes = in * static_cast<int64_t>(dtype_size(dtype));
  return row_bytes / 16 <= kGemvNormMaxGroups && rows * row_bytes <= kGemvNormMaxBytes;
}

void gemv_out(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& out,
              GemvEpilogue epilogue) {
  GemvFusion fusion;
  fusion.epilogue = epilogue;
  gemv_out(x, weight, bias, out, fusion);
}

void gemv_out(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& out,
              const GemvFusion& fusion) {
  const char* op = "gemv_out";
  const bool swiglu = fusion.epilogue == GemvEpilogue::swiglu;
  detail::check_out_dtype(op, x, "x");
  detail::check_dense(op, x, "x");
  detail::check_defined(op, weight, "weight");
  detail::check_same_dtype(op, x, "x", weight, "weight");
  detail::check_same_device(op, x, "x", weight, "weight");
  detail::check_dense(op, weight, "weight");
  MICROLLM_CHECK(x.dim() == 2 && weight.dim() == 2 && x.size(1) == weight.size(1), op,
                 "expected x (M, in) and weight (out, in), found x ", x.describe(), " and weight ",
                 weight.describe());
  const int64_t M = x.size(0), K = x.size(1);
  MICROLLM_CHECK(gemv_supported(x.device(), x.dtype(), M, K), op, "takes 1 to ", kGemvMaxRows,
                 " rows of x", x.is_cuda() ? " with in a multiple of 16 bytes of elements" : "",
                 ", found x ", x.describe());
  MICROLLM_CHECK(!swiglu || weight.size(0) % 2 == 0, op,
                 "the swiglu epilogue takes the fused (2F, in) gate/up weight, found ",
                 weight.describe());
  const bool rope = fusion.epilogue == GemvEpilogue::rope_kv_write;
  // Output columns of the product (with swiglu, of the gate/up pair; with rope, all of QKV).
  const int64_t N = swiglu ? weight.size(0) / 2
                    : rope ? check_rope_targets(op, x, weight, fusion.rope)
                           : weight.size(0);
  if (bias.defined()) {
    MICROLLM_CHECK(!swiglu, op, "the swiglu epilogue takes no bias, found ", bias.describe());
    detail::check_same_dtype(op, x, "x", bias, "bias");
    detail::check_same_device(op, x, "x", bias, "bias");
    detail::check_dense(op, bias, "bias");
    MICROLLM_CHECK(bias.dim() == 1 && bias.size(0) == N, op, "bias must be (", N, "), found ",
                   bias.describe());
  }
  MICROLLM_CHECK(
      fusion.kernel_rows == 0 || (fusion.kernel_rows >= M && fusion.kernel_rows <= kGemvMaxRows),
      op, "kernel_rows must be 0 or between x's ", M, " rows and ", kGemvMaxRows, ", found ",
      fusion.kernel_rows);
  const Tensor& norm = fusion.norm_weight;
  if (norm.defined()) {
    detail::check_same_dtype(op, x, "x", norm, "norm_weight");
    detail::check_same_device(op, x, "x", norm, "norm_weight");
    detail::check_dense(op, norm, "norm_weight");
    MICROLLM_CHECK(norm.dim() == 1 && norm.size(0) == K, op, "norm_weight must be (", K,
                   "), found ", norm.describe());
    MICROLLM_CHECK(gemv_norm_supported(x.device(), x.dtype(), M, K), op,
                   "the norm prologue keeps the normalized rows in shared memory: at most ",
                   kGemvNormMaxBytes, " bytes of them and ", kGemvNormMaxGroups,
                   " 16-byte groups per row, found x ", x.describe());
  }
  const Tensor& residual = fusion.residual;
  if (rope) {
    MICROLLM_CHECK(!out.defined(), op,
                   "the rope_kv_write epilogue writes q_out, k_out and the caches; out must be "
                   "undefined, found ",
                   out.describe());
  } else {
    detail::check_out_tensor(op, out, "out", x, "x");
    detail::check_out_shape(op, out, "out", x, 1, N);
    detail::check_apart(op, out, "out", x, "x");
    detail::check_apart(op, out, "out", weight, "weight");
    detail::check_apart(op, out, "out", bias, "bias");
    detail::check_apart(op, out, "out", norm, "norm_weight");
  }
  if (residual.defined()) {
    MICROLLM_CHECK(fusion.epilogue == GemvEpilogue::none, op,
                   "only the plain epilogue takes a residual, found one with the ",
                   swiglu ? "swiglu" : "rope_kv_write", " epilogue");
    detail::check_same_dtype(op, x, "x", residual, "residual");
    detail::check_same_device(op, x, "x", residual, "residual");
    detail::check_dense(op, residual, "residual");
    detail::check_out_shape(op, residual, "residual", x, 1, N);
    detail::check_apart_or_same(op, out, "out", residual, "residual");
    detail::check_apart(op, residual, "residual", x, "x");
  }
  if (x.is_cuda())
    MICROLLM_CHECK(aligned16(x.raw_data()) && aligned16(weight.raw_data()) &&
                       (!out.defined() || aligned16(out.raw_data())) &&
                       (!norm.defined() || aligned16(norm.raw_data())) &&
                       (!residual.defined() || aligned16(residual.raw_data())),
                   op, "CUDA operands must start at 16-byte aligned addresses, found x at ",
                   x.raw_data(), ", weight at ", weight.raw_data(), ", out at ",
                   out.defined() ? out.raw_data() : nullptr);
#if MICROLLM_WITH_CUDA
  if (x.is_cuda()) return gemv_cuda(x, weight, bias, out, fusion);
#endif
  // The CPU reference composes the operators the fusion stands for.
  Tensor input = x;
  if (norm.defined()) {
    input = Tensor::empty(x.shape(), x.dtype(), x.device());
    rms_norm_out(x, norm, fusion.norm_eps, input);
  }
  if (rope) {
    const GemvRopeKvWrite& r = fusion.rope;
    const int64_t M = x.size(0), H = r.q_out.size(1), Hkv = r.k_cache.size(2),
                  D = r.k_cache.size(3);
    const Tensor qkv = Tensor::empty({M, N}, x.dtype(), x.device());  // (M, H·D + 2·Hkv·D)
    gemv_cpu(input, weight, bias, qkv, false);
    rope_kv_write(qkv.narrow(1, 0, H * D).view({M, H, D}),
                  qkv.narrow(1, H * D, Hkv * D).view({M, Hkv, D}),
                  qkv.narrow(1, (H + Hkv) * D, Hkv * D).view({M, Hkv, D}), r.positions, r.inv_freq,
                  r.slot_mapping, r.q_out, r.k_out, r.k_cache, r.v_cache);
    return;
  }
  if (!residual.defined()) return gemv_cpu(input, weight, bias, out, swiglu);
  const Tensor product = Tensor::empty(out.shape(), out.dtype(), out.device());  // (M, N)
  gemv_cpu(input, weight, bias, product, false);
  add_out(residual, product, out);
}

}  // namespace microllm::ops
