// cross_entropy: validation (targets in range), dispatch and backward.
#include "microllm/ops/cross_entropy.h"

#include "../common.h"
#include "cross_entropy_kernels.h"
#include "microllm/autograd/node.h"

namespace microllm::ops {

Tensor cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index) {
  detail::check_floating("cross_entropy", logits, "logits");
  return cross_entropy(logits, targets, ignore_index, logits.dtype());
}

Tensor cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index,
                     DType loss_dtype) {
  MICROLLM_CHECK(is_floating(loss_dtype), "cross_entropy", "loss dtype must be floating, found ",
                 dtype_name(loss_dtype));
  detail::check_floating("cross_entropy", logits, "logits");
  detail::check_index("cross_entropy", targets, "targets");
  detail::check_same_device("cross_entropy", logits, "logits", targets, "targets");
  detail::check_rank("cross_entropy", logits, "logits", 2);
  const int64_t N = logits.size(0), V = logits.size(1);
  MICROLLM_CHECK(targets.dim() == 1 && targets.size(0) == N, "cross_entropy", "targets must be (",
                 N, ") for logits ", logits.describe(), ", found ", targets.describe());
  MICROLLM_CHECK(V > 0, "cross_entropy", "logits have no classes: ", logits.describe());
  const int64_t kept =
      detail::check_index_range("cross_entropy", targets, V, "target", "row", logits, ignore_index);
  const Device device = logits.device();
  const Tensor tc = targets.contiguous();                      // (N)
  const Tensor lc = detail::compute_operand(logits.detach());  // (N, V)
  const DType stat = detail::stat_dtype(lc.dtype());
  Tensor lse = Tensor::empty({N}, stat, device);  // (N)
  Tensor loss = Tensor::empty({}, stat, device);  // ()
  MICROLLM_KERNEL(device, cross_entropy_forward, lc, tc, ignore_index, kept, lse, loss);
  Tensor out = loss.to(loss_dtype);  // ()

  autograd::record(
      "cross_entropy", {logits, targets}, {&out},
      [lc, lse, tc, ignore_index, kept, dtype = logits.dtype()](const std::vector<Tensor>& g) {
        Tensor dl = Tensor::empty(lc.shape(), lc.dtype(), lc.device());  // (N, V)
        const Tensor dloss = g[0].to(lse.dtype());                       // ()
        MICROLLM_KERNEL(lc.device(), cross_entropy_backward, lc, tc, lse, dloss, ignore_index, kept,
                        dl);
        return std::vector<Tensor>{dl.to(dtype), Tensor()};
      });
  return out;
}

}  // namespace microllm::ops
