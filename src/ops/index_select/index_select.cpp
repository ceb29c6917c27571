// index_select: validation (every index in range), dispatch and the scatter-add backward.
#include "microllm/ops/index_select.h"

#include "../common.h"
#include "index_select_kernels.h"
#include "microllm/autograd/node.h"

namespace microllm::ops {

namespace {
// Views x as (outer, n, inner) around `dim`.
void split_around(const Shape& shape, int64_t dim, int64_t& outer, int64_t& inner) {
  outer = 1;
  inner = 1;
  for (int64_t d = 0; d < dim; ++d) outer *= shape[d];
  for (size_t d = static_cast<size_t>(dim) + 1; d < shape.size(); ++d) inner *= shape[d];
}
}  // namespace

Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index) {
  detail::check_defined("index_select", x, "x");
  detail::check_index("index_select", index, "index");
  detail::check_same_device("index_select", x, "x", index, "index");
  MICROLLM_CHECK(index.dim() == 1, "index_select", "index must be 1-D, found ", index.describe());
  dim = normalize_dim(dim, x.dim(), "index_select");
  const int64_t n = x.shape()[dim], K = index.size(0);
  detail::check_index_range("index_select", index, n, "index", "position", x);
  int64_t outer, inner;
  split_around(x.shape(), dim, outer, inner);
  Shape shape = x.shape();
  shape[dim] = K;
  const Device device = x.device();
  const Tensor ic = index.contiguous();
  const Tensor xc = x.detach().contiguous();             // (outer, n, inner)
  Tensor out = Tensor::empty(shape, x.dtype(), device);  // (outer, K, inner)
  MICROLLM_KERNEL(device, index_select_forward, xc, ic, outer, n, inner, out);

  autograd::record(
      "index_select", {x, index}, {&out},
      [ic, n, outer, inner, x_shape = x.shape(), dtype = x.dtype()](const std::vector<Tensor>& g) {
        // Accumulate in F32 (F64 for F64 inputs), then store in x's dtype.
        const DType acc = detail::stat_dtype(dtype);
        const Tensor dy = g[0].is_cuda() ? g[0].contiguous() : g[0].to(acc).contiguous();
        Tensor dx = Tensor::zeros(x_shape, acc, dy.device());
        MICROLLM_KERNEL(dy.device(), index_select_backward, dy, ic, outer, n, inner, dx);
        return std::vector<Tensor>{dx.to(dtype), Tensor()};
      });
  return out;
}

}  // namespace microllm::ops
