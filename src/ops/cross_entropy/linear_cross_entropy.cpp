// linear_cross_entropy: the LM head's GEMM and cross-entropy chunk by chunk (see
// microllm/ops/cross_entropy.h). Reuses linear_out's GEMM and the cross-entropy kernels; the
// whole (N, V) logits never exist.
#include <algorithm>

#include "../common.h"
#include "cross_entropy_kernels.h"
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

}  // namespace

Tensor linear_cross_entropy(const Tensor& hidden, const Tensor& weight, const Tensor& targets,
                            int64_t ignore_index, DType loss_dtype, int64_t chunk_rows) {
  MICROLLM_CHECK(is_floating(loss_dtype), kOp, "loss dtype must be floating, found ",
                 dtype_name(loss_dtype));
  MICROLLM_CHECK(chunk_rows >= 1, kOp, "chunk_rows must be ≥ 1, found ", chunk_rows);
  detail::check_floating(kOp, hidden, "hidden");
  detail::check_rank(kOp, hidden, "hidden", 2);
  detail::check_rank(kOp, weight, "weight", 2);
  detail::check_same_dtype(kOp, hidden, "hidden", weight, "weight");
  detail::check_same_device(kOp, hidden, "hidden", weight, "weight");
  detail::check_index(kOp, targets, "targets");
  detail::check_same_device(kOp, hidden, "hidden", targets, "targets");
  const int64_t N = hidden.size(0), C = hidden.size(1), V = weight.size(0);
  MICROLLM_CHECK(weight.size(1) == C, kOp, "weight must be (V, ", C, ") for hidden ",
                 hidden.describe(), ", found ", weight.describe());
  MICROLLM_CHECK(V > 0, kOp, "weight has no rows (no classes): ", weight.describe());
  MICROLLM_CHECK(targets.dim() == 1 && targets.size(0) == N, kOp, "targets must be (", N,
                 ") for hidden ", hidden.describe(), ", found ", targets.describe());
  const int64_t kept =
      detail::check_index_range(kOp, targets, V, "target", "row", hidden, ignore_index);

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

}  // namespace microllm::ops
