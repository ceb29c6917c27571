// cast: a converting copy that never aliases its input. The conversion itself (and its
// backward) is Tensor::to(dtype) in src/ops/view/view.cpp; cast adds the copy when the dtype
// already matches.
#include "microllm/ops/cast.h"

#include "../common.h"
#include "microllm/autograd/node.h"

namespace microllm::ops {

Tensor cast(const Tensor& x, DType dtype) {
  detail::check_defined("cast", x, "x");
  if (dtype != x.dtype()) return x.to(dtype);
  Tensor out = Tensor::empty(x.shape(), dtype, x.device());
  out.copy_from(x);
  if (is_floating(dtype))
    autograd::record("cast", {x}, {&out},
                     [](const std::vector<Tensor>& g) { return std::vector<Tensor>{g[0]}; });
  return out;
}

}  // namespace microllm::ops
