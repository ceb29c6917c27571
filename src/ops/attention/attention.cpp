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

}  // namespace

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
  // (T) I64
  const Tensor q_pos = positions_or_default(options.q_positions, T, S - T, "q_positions", device);
  // (S) I64
  const Tensor k_pos = positions_or_default(options.k_positions, S, 0, "k_positions", device);
  const AttentionShape shape{B, H, Hkv, T, S, D, options.causal, scale};

  const Tensor qc = detail::compute_operand(q.detach());       // (B, H, T, D)
  const Tensor kc = detail::compute_operand(k.detach());       // (B, Hkv, S, D)
  const Tensor vc = detail::compute_operand(v.detach());       // (B, Hkv, S, D)
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
