// cast, concat and index_select: validation, CPU copies and backward.
#include "microllm/ops/tensor_ops.h"

#include "../common.h"
#include "index_select_kernels.h"
#include "microllm/autograd/node.h"

namespace microllm::ops {

Tensor cast(const Tensor& x, DType dtype) {
  detail::check_defined("cast", x, "x");
  Tensor out = Tensor::empty(x.shape(), dtype, x.device());
  out.copy_from(x);
  if (is_floating(dtype)) {
    autograd::record("cast", {x}, {&out}, [source = x.dtype()](const std::vector<Tensor>& g) {
      return std::vector<Tensor>{g[0].to(source)};
    });
  }
  return out;
}

Tensor concat(const std::vector<Tensor>& tensors, int64_t dim) {
  MICROLLM_CHECK(!tensors.empty(), "concat", "expected at least one tensor");
  const Tensor& first = tensors[0];
  detail::check_defined("concat", first, "tensors[0]");
  dim = normalize_dim(dim, first.dim(), "concat");
  Shape shape = first.shape();
  shape[dim] = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    const std::string name = "tensors[" + std::to_string(i) + "]";
    detail::check_defined("concat", t, name.c_str());
    detail::check_same_dtype("concat", first, "tensors[0]", t, name.c_str());
    detail::check_same_device("concat", first, "tensors[0]", t, name.c_str());
    bool compatible = t.dim() == first.dim();
    for (int64_t d = 0; compatible && d < t.dim(); ++d)
      compatible = d == dim || t.shape()[d] == first.shape()[d];
    MICROLLM_CHECK(compatible, "concat", "tensor ", i, " ", t.describe(),
                   " does not match tensor 0 ", first.describe(), " outside dimension ", dim);
    shape[dim] += t.shape()[dim];
  }
  Tensor out = Tensor::empty(shape, first.dtype(), first.device());
  std::vector<int64_t> starts;
  int64_t start = 0;
  for (const Tensor& t : tensors) {
    out.narrow(dim, start, t.shape()[dim]).copy_from(t);
    starts.push_back(start);
    start += t.shape()[dim];
  }
  std::vector<int64_t> sizes;
  for (const Tensor& t : tensors) sizes.push_back(t.shape()[dim]);
  autograd::record("concat", tensors, {&out}, [dim, starts, sizes](const std::vector<Tensor>& g) {
    std::vector<Tensor> grads;
    for (size_t i = 0; i < starts.size(); ++i)
      grads.push_back(g[0].narrow(dim, starts[i], sizes[i]).contiguous());
    return grads;
  });
  return out;
}

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
