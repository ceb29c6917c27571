// concat: validation, a copy of each input into its slice of the output, and the backward
// that hands each input its slice of the gradient.
#include "microllm/ops/concat.h"

#include "../common.h"
#include "microllm/autograd/node.h"

namespace microllm::ops {

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

}  // namespace microllm::ops
