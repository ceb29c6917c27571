// rms_norm and add_rms_norm: validation, dispatch and backward; their allocation-free
// rms_norm_out / add_rms_norm_out run the same kernels into preallocated outputs.
#include "microllm/ops/rms_norm.h"

#include "../common.h"
#include "microllm/autograd/node.h"
#include "microllm/ops/elementwise.h"
#include "rms_norm_kernels.h"

namespace microllm::ops {
namespace {

void check_norm_args(const char* op, const Tensor& x, const Tensor& weight, double eps) {
  detail::check_floating(op, x, "x");
  detail::check_floating(op, weight, "weight");
  detail::check_same_dtype(op, x, "x", weight, "weight");
  detail::check_same_device(op, x, "x", weight, "weight");
  MICROLLM_CHECK(x.dim() >= 1 && weight.dim() == 1 && weight.size(0) == x.size(-1), op,
                 "expected x (..., C) and weight (C), found x ", x.describe(), " and weight ",
                 weight.describe());
  MICROLLM_CHECK(x.size(-1) > 0, op, "cannot normalize rows of width 0, found ", x.describe());
  MICROLLM_CHECK(eps >= 0.0, op, "eps must be non-negative, found ", eps);
}

void check_add_args(const char* op, const Tensor& x, const Tensor& residual) {
  detail::check_floating(op, residual, "residual");
  detail::check_same_dtype(op, x, "x", residual, "residual");
  detail::check_same_device(op, x, "x", residual, "residual");
  MICROLLM_CHECK(x.shape() == residual.shape(), op, "x ", x.describe(), " and residual ",
                 residual.describe(), " differ in shape");
}

// What the `_out` forms add to the operator's checks: operands in a kernel dtype, a dense
// weight, and `out` preallocated like x and apart from the weight.
void check_norm_out_args(const char* op, const Tensor& x, const Tensor& weight, const Tensor& out,
                         const char* out_name) {
  detail::check_out_dtype(op, x, "x");
  detail::check_dense(op, weight, "weight");
  detail::check_out_tensor(op, out, out_name, x, "x");
  detail::check_out_shape(op, out, out_name, x, "x");
  detail::check_apart(op, out, out_name, weight, "weight");
}

struct NormSaved {
  Tensor x, weight, rstd;  // dense, in the kernel's dtypes; rstd (R)
};

// y (kernel dtype) and what backward needs. With a `residual`, the norm is of x + residual:
// the sum (rounded to x's dtype) is returned as `sum` and saved; the kernels run in the
// dtype itself (CUDA, or F32/F64 on the CPU) do it in one call, else add first.
std::pair<Tensor, NormSaved> norm_forward(const Tensor& x, const Tensor& weight, double eps,
                                          const Tensor& residual = Tensor(),
                                          Tensor* sum = nullptr) {
  const Tensor wc = detail::compute_operand(weight.detach());
  Tensor xc;  // the rows normalized, in the kernel's dtype
  Tensor rc;  // the residual, when the kernel adds it
  if (residual.defined()) {
    autograd::NoGradGuard no_grad;  // the caller's node owns the whole backward
    const Tensor xd = detail::compute_operand(x.detach());
    if (xd.dtype() == x.dtype()) {
      rc = detail::compute_operand(residual.detach());
      xc = xd;
    } else {
      *sum = add(x, residual);  // a widened kernel would not round the sum to x's dtype
      xc = detail::compute_operand(sum->detach());
    }
  } else {
    xc = detail::compute_operand(x.detach());
  }
  Tensor y = Tensor::empty(xc.shape(), xc.dtype(), x.device());
  Tensor rstd =
      Tensor::empty({xc.numel() / xc.size(-1)}, detail::stat_dtype(xc.dtype()), x.device());
  if (rc.defined()) {
    *sum = Tensor::empty(xc.shape(), xc.dtype(), x.device());
    MICROLLM_KERNEL(x.device(), add_rms_norm_forward, xc, rc, wc, eps, *sum, y, rstd);
    return {y, {*sum, wc, rstd}};
  }
  MICROLLM_KERNEL(x.device(), rms_norm_forward, xc, wc, eps, y, rstd);
  return {y, {xc, wc, rstd}};
}

// (dx, dweight) in the kernel's dtype. A `dresidual` (the gradient reaching the norm's input
// by another path, in the input's dtype `dtype`) is added to dx as add would: inside the
// kernel when it runs in that dtype, else afterwards (then dx is in `dtype`).
std::pair<Tensor, Tensor> norm_backward(const NormSaved& s, const Tensor& dy,
                                        const Tensor& dresidual = Tensor(),
                                        DType dtype = DType::F32) {
  const Tensor dyc = detail::compute_operand(dy.to(s.x.dtype()));
  Tensor dx = Tensor::empty(s.x.shape(), s.x.dtype(), s.x.device());
  Tensor dw = Tensor::empty(s.weight.shape(), s.x.dtype(), s.x.device());
  const bool add_inside = dresidual.defined() && s.x.dtype() == dtype;
  const Tensor drc = add_inside ? detail::compute_operand(dresidual.to(dtype)) : Tensor();
  MICROLLM_KERNEL(s.x.device(), rms_norm_backward, s.x, s.weight, s.rstd, dyc, drc, dx, dw);
  if (dresidual.defined() && !add_inside) dx = add(dx.to(dtype), dresidual);
  return {dx, dw};
}

}  // namespace

Tensor rms_norm(const Tensor& x, const Tensor& weight, double eps) {
  check_norm_args("rms_norm", x, weight, eps);
  auto [y, saved] = norm_forward(x, weight, eps);
  Tensor out = y.to(x.dtype());
  autograd::record("rms_norm", {x, weight}, {&out},
                   [saved, dtype = x.dtype()](const std::vector<Tensor>& g) {
                     auto [dx, dw] = norm_backward(saved, g[0]);
                     return std::vector<Tensor>{dx.to(dtype), dw.to(dtype)};
                   });
  return out;
}

AddRmsNormResult add_rms_norm(const Tensor& x, const Tensor& residual, const Tensor& weight,
                              double eps) {
  check_norm_args("add_rms_norm", x, weight, eps);
  check_add_args("add_rms_norm", x, residual);
  Tensor sum;  // (shape of x) x + residual in x's dtype
  auto [y, saved] = norm_forward(x, weight, eps, residual, &sum);
  AddRmsNormResult result{sum.to(x.dtype()), y.to(x.dtype())};
  autograd::record("add_rms_norm", {x, residual, weight}, {&result.sum, &result.normed},
                   [saved, dtype = x.dtype()](const std::vector<Tensor>& g) {
                     // The sum feeds both outputs: its gradient is the direct one plus the
                     // one coming back through the norm (added by the norm's dx kernel).
                     Tensor d_sum, d_weight;
                     if (g[1].defined()) {
                       auto [dx, dw] = norm_backward(saved, g[1], g[0], dtype);
                       d_sum = dx.to(dtype);
                       d_weight = dw.to(dtype);
                     } else {
                       d_sum = g[0];
                     }
                     return std::vector<Tensor>{d_sum, d_sum, d_weight};
                   });
  return result;
}

void rms_norm_out(const Tensor& x, const Tensor& weight, double eps, const Tensor& out) {
  const char* op = "rms_norm_out";
  check_norm_args(op, x, weight, eps);
  check_norm_out_args(op, x, weight, out, "out");
  detail::check_dense(op, x, "x");
  detail::check_apart(op, out, "out", x, "x");
  MICROLLM_KERNEL(x.device(), rms_norm_forward, x, weight, eps, out, Tensor());
}

void add_rms_norm_out(const Tensor& x, const Tensor& residual, const Tensor& weight, double eps,
                      const Tensor& sum_out, const Tensor& normed_out) {
  const char* op = "add_rms_norm_out";
  check_norm_args(op, x, weight, eps);
  check_add_args(op, x, residual);
  check_norm_out_args(op, x, weight, sum_out, "sum_out");
  check_norm_out_args(op, x, weight, normed_out, "normed_out");
  // The sum may replace x or the residual (the residual stream updated in place); the
  // normed rows go to memory of their own.
  detail::check_apart_or_same(op, sum_out, "sum_out", x, "x");
  detail::check_apart_or_same(op, sum_out, "sum_out", residual, "residual");
  detail::check_apart(op, normed_out, "normed_out", x, "x");
  detail::check_apart(op, normed_out, "normed_out", residual, "residual");
  detail::check_apart(op, normed_out, "normed_out", sum_out, "sum_out");
  // add_rms_norm's two steps, the elementwise sum, stored, then the norm of the stored sum:
  // one kernel over dense rows (one pass on CUDA), else add_out's strided kernel first.
  if (x.is_contiguous() && residual.is_contiguous()) {
    MICROLLM_KERNEL(x.device(), add_rms_norm_forward, x, residual, weight, eps, sum_out, normed_out,
                    Tensor());
    return;
  }
  add_out(x, residual, sum_out);
  MICROLLM_KERNEL(x.device(), rms_norm_forward, sum_out, weight, eps, normed_out, Tensor());
}

}  // namespace microllm::ops
