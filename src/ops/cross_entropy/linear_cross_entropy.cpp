// The LM head's GEMM and cross-entropy as one node (see microllm/ops/cross_entropy.h), on the
// cross-entropy kernels: linear_cross_entropy chunk by chunk, so the whole (N, V) logits never
// exist; lm_head_cross_entropy with the logits' gradient written over them in the forward.
#include <algorithm>

#include "../common.h"
#include "cross_entropy_kernels.h"
#include "microllm/autograd/gradient_buffer.h"
#include "microllm/autograd/node.h"
#include "microllm/ops/cross_entropy.h"
#include "microllm/ops/elementwise.h"
#include "microllm/ops/matmul.h"

namespace microllm::ops {
namespace {

constexpr const char* kOp = "linear_cross_entropy";

// logits (rows, V) of one chunk in the kernels' compute dtype: hidden rows · weightᵀ.
Tensor chunk_logits(const Tensor& hidden_rows, const Tensor& weight) {
  return detail::compute_operand(matmul(hidden_rows, weight, false, true));  // (rows, V)
}

// x · s for a one-element s of the statistics' dtype (read on the device), computed in that
// dtype and rounded to x's once. x (N, C); s ().
Tensor scaled(const Tensor& x, const Tensor& s) { return mul(x.to(s.dtype()), s).to(x.dtype()); }

// Checks the LM head + loss operands; returns the number of kept targets.
int64_t check_lm_head_loss(const char* op, const Tensor& hidden, const Tensor& weight,
                           const Tensor& targets, int64_t ignore_index, DType loss_dtype) {
  MICROLLM_CHECK(is_floating(loss_dtype), op, "loss dtype must be floating, found ",
                 dtype_name(loss_dtype));
  detail::check_floating(op, hidden, "hidden");
  detail::check_rank(op, hidden, "hidden", 2);
  detail::check_rank(op, weight, "weight", 2);
  detail::check_same_dtype(op, hidden, "hidden", weight, "weight");
  detail::check_same_device(op, hidden, "hidden", weight, "weight");
  detail::check_index(op, targets, "targets");
  detail::check_same_device(op, hidden, "hidden", targets, "targets");
  const int64_t N = hidden.size(0), C = hidden.size(1), V = weight.size(0);
  MICROLLM_CHECK(weight.size(1) == C, op, "weight must be (V, ", C, ") for hidden ",
                 hidden.describe(), ", found ", weight.describe());
  MICROLLM_CHECK(V > 0, op, "weight has no rows (no classes): ", weight.describe());
  MICROLLM_CHECK(targets.dim() == 1 && targets.size(0) == N, op, "targets must be (", N,
                 ") for hidden ", hidden.describe(), ", found ", targets.describe());
  return detail::check_index_range(op, targets, V, "target", "row", hidden, ignore_index);
}

}  // namespace

Tensor linear_cross_entropy(const Tensor& hidden, const Tensor& weight, const Tensor& targets,
                            int64_t ignore_index, DType loss_dtype, int64_t chunk_rows) {
  MICROLLM_CHECK(chunk_rows >= 1, kOp, "chunk_rows must be ≥ 1, found ", chunk_rows);
  const int64_t kept = check_lm_head_loss(kOp, hidden, weight, targets, ignore_index, loss_dtype);
  const int64_t N = hidden.size(0);
  const Device device = hidden.device();
  const Tensor h = hidden.detach().contiguous();  // (N, C)
  const Tensor w = weight.detach().contiguous();  // (V, C)
  const Tensor t = targets.contiguous();          // (N)
  const DType stat = detail::stat_dtype(h.dtype());
  Tensor lse = Tensor::empty({N}, stat, device);  // (N)
  Tensor loss = Tensor::zeros({}, stat, device);  // () the sum of the chunks' shares
  for (int64_t r0 = 0; r0 < N; r0 += chunk_rows) {
    const int64_t rows = std::min(chunk_rows, N - r0);
    const Tensor logits = chunk_logits(h.narrow(0, r0, rows), w);  // (rows, V)
    Tensor part = Tensor::empty({}, stat, device);                 // () Σ_chunk / kept
    MICROLLM_KERNEL(device, cross_entropy_forward, logits, t.narrow(0, r0, rows), ignore_index,
                    kept, lse.narrow(0, r0, rows), part);
    add_out(loss, part, loss);
  }
  Tensor out = loss.to(loss_dtype);  // ()

  autograd::record(
      kOp, {hidden, weight, targets}, {&out},
      [h, w, t, lse, ignore_index, kept, chunk_rows](const std::vector<Tensor>& g) {
        const int64_t n = h.size(0);
        const Tensor dloss = g[0].to(lse.dtype());                      // ()
        Tensor dh = Tensor::empty(h.shape(), h.dtype(), h.device());    // (N, C)
        Tensor dw = Tensor::zeros(w.shape(), lse.dtype(), w.device());  // (V, C) F32/F64
        for (int64_t r0 = 0; r0 < n; r0 += chunk_rows) {
          const int64_t rows = std::min(chunk_rows, n - r0);
          const Tensor hr = h.narrow(0, r0, rows);    // (rows, C)
          const Tensor logits = chunk_logits(hr, w);  // (rows, V)
          Tensor dl = Tensor::empty(logits.shape(), logits.dtype(), logits.device());
          MICROLLM_KERNEL(logits.device(), cross_entropy_backward, logits, t.narrow(0, r0, rows),
                          lse.narrow(0, r0, rows), dloss, ignore_index, kept, dl);
          const Tensor dlc = dl.to(h.dtype());               // (rows, V) as the GEMMs take
          dh.narrow(0, r0, rows).copy_from(matmul(dlc, w));  // (rows, C)
          add_out(dw, matmul(dlc, hr, true, false).to(dw.dtype()), dw);  // += (V, C)
        }
        return std::vector<Tensor>{dh, dw.to(w.dtype()), Tensor()};
      });
  return out;
}

Tensor lm_head_cross_entropy(const Tensor& hidden, const Tensor& weight, const Tensor& targets,
                             int64_t ignore_index, DType loss_dtype) {
  const char* op = "lm_head_cross_entropy";
  const int64_t kept = check_lm_head_loss(op, hidden, weight, targets, ignore_index, loss_dtype);
  const Device device = hidden.device();
  const Tensor h = hidden.detach().contiguous();  // (N, C)
  const Tensor w = weight.detach().contiguous();  // (V, C)
  const Tensor t = targets.contiguous();          // (N)
  const DType stat = detail::stat_dtype(h.dtype());
  Tensor lse = Tensor::empty({h.size(0)}, stat, device);  // (N)
  Tensor loss = Tensor::empty({}, stat, device);          // ()
  // The logits, then (softmax − onehot)/kept over them in place; without a backward to come
  // (evaluation), the loss alone.
  Tensor dl = chunk_logits(h, w);  // (N, V)
  if (!autograd::any_requires_grad({hidden, weight})) {
    MICROLLM_KERNEL(device, cross_entropy_forward, dl, t, ignore_index, kept, lse, loss);
    return loss.to(loss_dtype);
  }
  MICROLLM_KERNEL(device, cross_entropy_forward_grad, dl, t, ignore_index, kept, lse, loss, dl);
  Tensor out = loss.to(loss_dtype);  // ()

  // The weight's handle (not detached) is kept only to claim its gradient buffer, as linear's.
  const Tensor claim_from = autograd::gradient_claims_enabled() ? weight : Tensor();
  autograd::record(op, {hidden, weight, targets}, {&out},
                   [h, w, dl, claim_from, stat](const std::vector<Tensor>& g) {
                     const Tensor dloss = g[0].to(stat);               // ()
                     const Tensor dlc = dl.to(h.dtype());              // (N, V) as the GEMMs take
                     const Tensor dh = scaled(matmul(dlc, w), dloss);  // (N, C)
                     const Tensor hs = scaled(h, dloss);               // (N, C) dloss · h
                     Tensor dw = autograd::claim_gradient_buffer(claim_from);  // (V, C)
                     if (dw.defined())
                       matmul_out(dlc, hs, true, false, dw);
                     else
                       dw = matmul(dlc, hs, true, false);
                     return std::vector<Tensor>{dh, dw, Tensor()};
                   });
  return out;
}

}  // namespace microllm::ops
