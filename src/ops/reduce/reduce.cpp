// Reductions: validation, dispatch and backward.
#include "microllm/ops/reduce.h"

#include "../common.h"
#include "microllm/autograd/node.h"
#include "microllm/ops/elementwise.h"
#include "reduce_kernels.h"

namespace microllm::ops {
namespace {

struct Reduced {
  Tensor values;  // keepdim shape, compute dtype narrowed back to x's dtype
  Tensor index;   // for Max/Argmax: I64, keepdim shape
  Shape keepdim_shape;
};

// Runs one reduction kernel along `dim` without autograd.
Reduced reduce_compute(ReduceOp op, const char* name, const Tensor& x, int64_t dim) {
  detail::check_floating(name, x, "x");
  dim = normalize_dim(dim, x.dim(), name);
  const int64_t n = x.shape()[dim];
  MICROLLM_CHECK(n > 0 || op == ReduceOp::Sum, name, "cannot reduce the empty dimension ", dim,
                 " of ", x.describe());
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < dim; ++d) outer *= x.shape()[d];
  for (int64_t d = dim + 1; d < x.dim(); ++d) inner *= x.shape()[d];
  Shape keep = x.shape();
  keep[dim] = 1;
  const Tensor xc = detail::compute_operand(x.detach());  // (outer, n, inner) dense
  const Device device = x.device();
  Reduced r{{}, {}, keep};
  if (op == ReduceOp::Sum) {
    Tensor out = Tensor::empty(keep, xc.dtype(), device);
    MICROLLM_KERNEL(device, reduce_forward, op, xc, outer, n, inner, out);
    r.values = out.to(x.dtype());
    return r;
  }
  Tensor index = Tensor::empty(keep, DType::I64, device);
  MICROLLM_KERNEL(device, reduce_forward, ReduceOp::Argmax, xc, outer, n, inner, index);
  r.index = index;
  if (op == ReduceOp::Max) {
    Tensor out = Tensor::empty(keep, xc.dtype(), device);
    MICROLLM_KERNEL(device, reduce_forward, ReduceOp::Max, xc, outer, n, inner, out);
    r.values = out.to(x.dtype());
  }
  return r;
}

Tensor drop_dim(const Tensor& t, int64_t dim, bool keepdim) { return keepdim ? t : t.squeeze(dim); }

}  // namespace

Tensor sum(const Tensor& x, int64_t dim, bool keepdim) {
  Reduced r = reduce_compute(ReduceOp::Sum, "sum", x, dim);
  Tensor out = r.values;
  const Shape shape = x.shape();
  autograd::record("sum", {x}, {&out}, [shape](const std::vector<Tensor>& g) {
    return std::vector<Tensor>{g[0].expand(shape).contiguous()};
  });
  return drop_dim(out, normalize_dim(dim, x.dim(), "sum"), keepdim);
}

Tensor mean(const Tensor& x, int64_t dim, bool keepdim) {
  detail::check_floating("mean", x, "x");
  const int64_t d = normalize_dim(dim, x.dim(), "mean");
  MICROLLM_CHECK(x.shape()[d] > 0, "mean", "cannot average the empty dimension ", d, " of ",
                 x.describe());
  return scale(sum(x, d, keepdim), 1.0 / static_cast<double>(x.shape()[d]));
}

Tensor max(const Tensor& x, int64_t dim, bool keepdim) {
  Reduced r = reduce_compute(ReduceOp::Max, "max", x, dim);
  const int64_t d = normalize_dim(dim, x.dim(), "max");
  Tensor out = r.values;
  autograd::record("max", {x}, {&out},
                   [x = x.detach(), index = r.index, d](const std::vector<Tensor>& g) {
                     int64_t outer = 1, inner = 1;
                     for (int64_t k = 0; k < d; ++k) outer *= x.shape()[k];
                     for (int64_t k = d + 1; k < x.dim(); ++k) inner *= x.shape()[k];
                     const Tensor gc = detail::compute_operand(g[0]);
                     Tensor grad_x = Tensor::zeros(x.shape(), gc.dtype(), gc.device());
                     MICROLLM_KERNEL(gc.device(), scatter_along_dim, gc, index, outer, x.shape()[d],
                                     inner, grad_x);
                     return std::vector<Tensor>{grad_x.to(x.dtype())};
                   });
  return drop_dim(out, d, keepdim);
}

Tensor argmax(const Tensor& x, int64_t dim, bool keepdim) {
  Reduced r = reduce_compute(ReduceOp::Argmax, "argmax", x, dim);
  return drop_dim(r.index, normalize_dim(dim, x.dim(), "argmax"), keepdim);
}

Tensor sum_all(const Tensor& x) {
  detail::check_defined("sum_all", x, "x");
  return sum(x.reshape({x.numel()}), 0, false);
}

Tensor mean_all(const Tensor& x) {
  detail::check_defined("mean_all", x, "x");
  MICROLLM_CHECK(x.numel() > 0, "mean_all", "cannot average an empty tensor ", x.describe());
  return scale(sum_all(x), 1.0 / static_cast<double>(x.numel()));
}

Tensor sum_to_shape(const Tensor& grad, const Shape& shape) {
  if (grad.shape() == shape) return grad;
  Tensor g = grad;
  // Leading dimensions that broadcasting added.
  while (g.dim() > static_cast<int64_t>(shape.size())) g = sum(g, 0, false);
  // Dimensions that were size 1 and got expanded.
  for (int64_t d = 0; d < g.dim(); ++d)
    if (shape[d] == 1 && g.shape()[d] != 1) g = sum(g, d, true);
  MICROLLM_CHECK(g.shape() == shape, "sum_to_shape", "cannot reduce ", shape_str(grad.shape()),
                 " to ", shape_str(shape));
  return g;
}

}  // namespace microllm::ops
