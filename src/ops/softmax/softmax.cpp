// softmax / log_softmax: validation, dispatch (any dimension, by moving it last) and backward.
#include "microllm/ops/softmax.h"

#include "../common.h"
#include "microllm/autograd/node.h"
#include "softmax_kernels.h"

namespace microllm::ops {
namespace {

Tensor softmax_impl(const Tensor& x, int64_t dim, bool log) {
  const char* name = log ? "log_softmax" : "softmax";
  detail::check_floating(name, x, "x");
  MICROLLM_CHECK(x.dim() >= 1, name, "expected at least one dimension, found ", x.describe());
  dim = normalize_dim(dim, x.dim(), name);
  const int64_t last = x.dim() - 1;
  const Device device = x.device();
  // Rows along the last dimension; other dims are moved there and back.
  const Tensor xc = detail::compute_operand(x.detach().transpose(dim, last));
  Tensor y = Tensor::empty(xc.shape(), xc.dtype(), device);
  if (y.numel() > 0) MICROLLM_KERNEL(device, softmax_forward, xc, y, log);
  Tensor out = y.transpose(dim, last).contiguous().to(x.dtype());
  autograd::record(
      name, {x}, {&out}, [y, dim, last, log, dtype = x.dtype()](const std::vector<Tensor>& g) {
        const Tensor dy = detail::compute_operand(g[0].transpose(dim, last).to(y.dtype()));
        Tensor dx = Tensor::empty(y.shape(), y.dtype(), y.device());
        if (dx.numel() > 0) MICROLLM_KERNEL(y.device(), softmax_backward, y, dy, dx, log);
        return std::vector<Tensor>{dx.transpose(dim, last).contiguous().to(dtype)};
      });
  return out;
}

}  // namespace

Tensor softmax(const Tensor& x, int64_t dim) { return softmax_impl(x, dim, false); }
Tensor log_softmax(const Tensor& x, int64_t dim) { return softmax_impl(x, dim, true); }

}  // namespace microllm::ops
