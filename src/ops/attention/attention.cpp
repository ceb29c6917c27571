// attention: validation (shapes, GQA grouping, positions), dispatch and backward.
#include "microllm/ops/attention.h"

#include "../common.h"
#include "attention_kernels.h"
#include "microllm/autograd/node.h"

namespace microllm::ops {
namespace {

// Positions as a dense I64 (n) tensor: the given one, or start..start+n-1.
Tensor positions_or_default(const Tensor& given, int64_t n, int64_t start, const char* name,
                            Device device) {
  if (!given.defined()) {
    std::vector<int64_t> values(static_cast<size_t>(n));  // (n)
    for (int64_t i = 0; i < n; ++i) values[i] = start + i;
    return Tensor::from_vector(values, {n}, DType::I64, device);
  }
  detail::check_index("attention", given, name);
  MICROLLM_CHECK(given.dim() == 1 && given.size(0) == n, "attention", name, " must be (", n,
                 "), found ", given.describe());
  MICROLLM_CHECK(given.device() == device, "attention", name, " ", given.describe(),
                 " is not on the device of q (", device, ")");
  return given.to(DType::I64).contiguous();
}

// Whether this call runs the flash kernels: asked for, or Auto where they apply. Asking for
// flash where it does not apply is an Error that says why.
bool use_flash(AttentionBackend backend, const Tensor& q, int64_t D) {
  if (backend == AttentionBackend::Reference) return false;
  const bool dtype_ok = q.dtype() == DType::BF16 || q.dtype() == DType::F16;
  const bool dim_ok = D == 64 || D == 128;
#if MICROLLM_WITH_CUDA
  const bool device_ok = q.is_cuda();
#else
  const bool device_ok = false;
#endif
  if (backend == AttentionBackend::Auto) return device_ok && dtype_ok && dim_ok;
  MICROLLM_CHECK(device_ok, "attention", "the flash backend runs on CUDA only, found q ",
                 q.describe());
  MICROLLM_CHECK(dtype_ok, "attention", "the flash backend takes bf16 or f16, found q ",
                 q.describe());
  MICROLLM_CHECK(dim_ok, "attention",
                 "the flash backend takes head dims 64 and 128, found D = ", D);
  return true;
}

// The flash forward, with a backward that recomputes the probabilities from the saved
// log-sum-exp. q, k, v the caller's tensors (for autograd); qc, kc, vc their dense copies.
Tensor flash_attention(const AttentionShape& shape, const Tensor& q, const Tensor& k,
                       const Tensor& v, const Tensor& qc, const Tensor& kc, const Tensor& vc,
                       const Tensor& q_pos, const Tensor& k_pos) {
#if MICROLLM_WITH_CUDA
  Tensor out = Tensor::empty(qc.shape(), qc.dtype(), qc.device());  // (B, H, T, D)
  // (B, H, T) F32
  const Tensor lse = Tensor::empty({shape.B, shape.H, shape.T}, DType::F32, qc.device());
  flash_attention_forward_cuda(shape, qc, kc, vc, q_pos, k_pos, out, lse);
  const Tensor saved_out = out;
  out = out.to(q.dtype());
  autograd::record(
      "attention", {q, k, v}, {&out},
      [shape, qc, kc, vc, q_pos, k_pos, saved_out, lse,
       dtype = q.dtype()](const std::vector<Tensor>& g) {
        // (B, H, T, D)
        const Tensor dout = detail::compute_operand(g[0].to(qc.dtype()));
        Tensor dq = Tensor::empty(qc.shape(), qc.dtype(), qc.device());  // (B, H, T, D)
        Tensor dk = Tensor::empty(kc.shape(), kc.dtype(), kc.device());  // (B, Hkv, S, D)
        Tensor dv = Tensor::empty(vc.shape(), vc.dtype(), vc.device());  // (B, Hkv, S, D)
        flash_attention_backward_cuda(shape, qc, kc, vc, saved_out, lse, dout, q_pos, k_pos, dq, dk,
                                      dv);
        return std::vector<Tensor>{dq.to(dtype), dk.to(dtype), dv.to(dtype)};
      });
  return out;
#else
  (void)shape, (void)q, (void)k, (void)v, (void)qc, (void)kc, (void)vc, (void)q_pos, (void)k_pos;
  MICROLLM_FAIL("attention", "the flash backend runs on CUDA only");
#endif
}

}  // namespace

AttentionBackend parse_attention_backend(const std::string& name) {
  if (name == "auto") return AttentionBackend::Auto;
  if (name == "reference") return AttentionBackend::Reference;
  if (name == "flash") return AttentionBackend::Flash;
  MICROLLM_FAIL("attention", "expected an attention backend auto, reference or flash, found '",
                name, "'");
}

const char* attention_backend_name(AttentionBackend backend) {
  switch (backend) {
    case AttentionBackend::Reference:
      return "reference";
    case AttentionBackend::Flash:
      return "flash";
    default:
      return "auto";
  }
}

Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v,
                 const AttentionOptions& options) {
  detail::check_floating("attention", q, "q");
  detail::check_floating("attention", k, "k");
  detail::check_floating("attention", v, "v");
  detail::check_same_dtype("attention", q, "q", k, "k");
  detail::check_same_dtype("attention", q, "q", v, "v");
  detail::check_same_device("attention", q, "q", k, "k");
  detail::check_same_device("attention", q, "q", v, "v");
  detail::check_rank("attention", q, "q", 4);
  detail::check_rank("attention", k, "k", 4);
  detail::check_rank("attention", v, "v", 4);
  const int64_t B = q.size(0), H = q.size(1), T = q.size(2), D = q.size(3);
  const int64_t Hkv = k.size(1), S = k.size(2);
  MICROLLM_CHECK(k.shape() == v.shape() && k.size(0) == B && k.size(3) == D, "attention",
                 "expected q (B,H,T,D) and k, v (B,Hkv,S,D), found q ", q.describe(), ", k ",
                 k.describe(), ", v ", v.describe());
  MICROLLM_CHECK(Hkv > 0 && H % Hkv == 0, "attention", "query heads ", H,
                 " are not a multiple of KV heads ", Hkv, " (q ", q.describe(), ", k ",
                 k.describe(), ")");
  MICROLLM_CHECK(D > 0, "attention", "head dimension is 0 in q ", q.describe());
  const double scale =
      std::isnan(options.scale) ? 1.0 / std::sqrt(static_cast<double>(D)) : options.scale;
  MICROLLM_CHECK(T <= S || options.q_positions.defined(), "attention", "q has ", T,
                 " queries but k has only ", S,
                 " keys; default positions place the queries at the "
                 "last T keys, so pass q_positions (q ",
                 q.describe(), ", k ", k.describe(), ")");
  const Device device = q.device();
  const AttentionShape shape{B, H, Hkv, T, S, D, options.causal, scale};
  const Tensor qc = detail::compute_operand(q.detach());  // (B, H, T, D)
  const Tensor kc = detail::compute_operand(k.detach());  // (B, Hkv, S, D)
  const Tensor vc = detail::compute_operand(v.detach());  // (B, Hkv, S, D)
  if (use_flash(options.backend, qc, D)) {
    // Given positions as dense I64, or none: the kernels then know the default layout.
    const bool given = options.q_positions.defined() || options.k_positions.defined();
    // (T) I64, (S) I64, or both undefined
    const Tensor q_pos =
        given ? positions_or_default(options.q_positions, T, S - T, "q_positions", device)
              : Tensor();
    const Tensor k_pos =
        given ? positions_or_default(options.k_positions, S, 0, "k_positions", device) : Tensor();
    return flash_attention(shape, q, k, v, qc, kc, vc, q_pos, k_pos);
  }
  // (T) I64
  const Tensor q_pos = positions_or_default(options.q_positions, T, S - T, "q_positions", device);
  // (S) I64
  const Tensor k_pos = positions_or_default(options.k_positions, S, 0, "k_positions", device);
  Tensor out = Tensor::empty(qc.shape(), qc.dtype(), device);  // (B, H, T, D)
  Tensor probs =
      Tensor::empty({B, H, T, S}, detail::stat_dtype(qc.dtype()), device);  // (B, H, T, S)
  MICROLLM_KERNEL(device, attention_forward, shape, qc, kc, vc, q_pos, k_pos, out, probs);
  out = out.to(q.dtype());
  autograd::record("attention", {q, k, v}, {&out},
                   [shape, qc, kc, vc, probs, dtype = q.dtype()](const std::vector<Tensor>& g) {
                     // (B, H, T, D)
                     const Tensor dout = detail::compute_operand(g[0].to(qc.dtype()));
                     // (B, H, T, D)
                     Tensor dq = Tensor::empty(qc.shape(), qc.dtype(), qc.device());
                     // (B, Hkv, S, D)
                     Tensor dk = Tensor::empty(kc.shape(), kc.dtype(), kc.device());
                     // (B, Hkv, S, D)
                     Tensor dv = Tensor::empty(vc.shape(), vc.dtype(), vc.device());
                     MICROLLM_KERNEL(qc.device(), attention_backward, shape, qc, kc, vc, probs,
                                     dout, dq, dk, dv);
                     return std::vector<Tensor>{dq.to(dtype), dk.to(dtype), dv.to(dtype)};
                   });
  return out;
}

}  // namespace microllm::ops
