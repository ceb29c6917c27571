// cast: a converting copy that never aliases its input. The conversion itself (and its
// backward) is Tensor::to(dtype) in src/ops/view/view.cpp; cast adds the copy when the dtype
// already matches. cast_out converts into a preallocated tensor.
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

void cast_out(const Tensor& x, const Tensor& out) {
  const char* op = "cast_out";
  detail::check_defined(op, x, "x");
  detail::check_defined(op, out, "out");
  MICROLLM_CHECK(out.device() == x.device(), op, "'out' ", out.describe(),
                 " must be on the device of 'x' ", x.describe(),
                 " (cast_out does not move data between devices)");
  detail::check_dense(op, out, "out");
  detail::check_out_shape(op, out, "out", x, "x");
  detail::check_apart(op, out, "out", x, "x");
  Tensor target = out;  // a second handle to out (copy_from is not const)
  target.copy_from(x);  // the converting copy of cast and Tensor::to(dtype)
}

}  // namespace microllm::ops
