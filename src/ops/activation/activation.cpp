// silu and swiglu: validation, dispatch and backward; silu_out / swiglu_out, their
// allocation-free forms, run the same kernels (the operators call them).
#include "microllm/ops/activation.h"

#include "../common.h"
#include "activation_kernels.h"
#include "microllm/autograd/node.h"

namespace microllm::ops {

void silu_out(const Tensor& x, const Tensor& out) {
  const char* op = "silu_out";
  detail::check_out_dtype(op, x, "x");
  detail::check_dense(op, x, "x");
  detail::check_out_tensor(op, out, "out", x, "x");
  detail::check_out_shape(op, out, "out", x, "x");
  detail::check_apart_or_same(op, out, "out", x, "x");
  MICROLLM_KERNEL(x.device(), silu_forward, x, out);
}

void swiglu_out(const Tensor& gate, const Tensor& up, const Tensor& out) {
  const char* op = "swiglu_out";
  detail::check_out_dtype(op, gate, "gate");
  detail::check_floating(op, up, "up");
  detail::check_same_dtype(op, gate, "gate", up, "up");
  detail::check_same_device(op, gate, "gate", up, "up");
  MICROLLM_CHECK(gate.shape() == up.shape(), op, "gate ", gate.describe(), " and up ",
                 up.describe(), " differ in shape");
  detail::check_rows(op, gate, "gate");
  detail::check_rows(op, up, "up");
  detail::check_out_tensor(op, out, "out", gate, "gate");
  detail::check_out_shape(op, out, "out", gate, "gate");
  detail::check_apart_or_same(op, out, "out", gate, "gate");
  detail::check_apart_or_same(op, out, "out", up, "up");
  MICROLLM_KERNEL(gate.device(), swiglu_forward, gate, up, out);
}

Tensor silu(const Tensor& x) {
  detail::check_floating("silu", x, "x");
  const Tensor xc = detail::compute_operand(x.detach());
  Tensor y = Tensor::empty(xc.shape(), xc.dtype(), x.device());
  silu_out(xc, y);
  Tensor out = y.to(x.dtype());
  autograd::record("silu", {x}, {&out}, [xc, dtype = x.dtype()](const std::vector<Tensor>& g) {
    const Tensor dy = detail::compute_operand(g[0].to(xc.dtype()));
    Tensor dx = Tensor::empty(xc.shape(), xc.dtype(), xc.device());
    MICROLLM_KERNEL(xc.device(), silu_backward, xc, dy, dx);
    return std::vector<Tensor>{dx.to(dtype)};
  });
  return out;
}

namespace {

// Whether up lies right after gate in every row of one matrix: the two halves (…, 2F) of a
// joined gate/up projection (split by ops::split).
bool halves_of_one(const Tensor& gate, const Tensor& up) {
  detail::RowLayout g{}, u{};
  return detail::row_layout(gate, g) && detail::row_layout(up, u) &&
         gate.storage() == up.storage() && g.rows > 1 && g.ld == 2 * g.cols && u.ld == g.ld &&
         up.offset() == gate.offset() + g.cols;
}

}  // namespace

Tensor swiglu(const Tensor& gate, const Tensor& up) {
  detail::check_floating("swiglu", gate, "gate");
  detail::check_floating("swiglu", up, "up");
  detail::check_same_dtype("swiglu", gate, "gate", up, "up");
  detail::check_same_device("swiglu", gate, "gate", up, "up");
  MICROLLM_CHECK(gate.shape() == up.shape(), "swiglu", "gate ", gate.describe(), " and up ",
                 up.describe(), " differ in shape");
  // Read in place when they are dense or column blocks of one matrix (the halves of a joined
  // gate/up projection); otherwise dense copies.
  const Tensor gc = detail::rows_operand(gate.detach());
  const Tensor uc = detail::rows_operand(up.detach());
  Tensor y = Tensor::empty(gc.shape(), gc.dtype(), gate.device());
  swiglu_out(gc, uc, y);
  Tensor out = y.to(gate.dtype());
  autograd::record(
      "swiglu", {gate, up}, {&out},
      [gc, uc, halves = halves_of_one(gc, uc), dtype = gate.dtype()](const std::vector<Tensor>& g) {
        const Tensor dy = detail::compute_operand(g[0].to(gc.dtype()));
        Tensor dgate, dup;  // each of gc's shape
        if (halves) {
          // As the halves of one (…, 2F) buffer, so that the split's backward joins them as a
          // view instead of a copy.
          Shape joined = gc.shape();
          const int64_t F = joined.back();
          joined.back() = 2 * F;
          const Tensor both = Tensor::empty(joined, gc.dtype(), gc.device());  // (…, 2F)
          dgate = both.narrow(gc.dim() - 1, 0, F);
          dup = both.narrow(gc.dim() - 1, F, F);
        } else {
          dgate = Tensor::empty(gc.shape(), gc.dtype(), gc.device());
          dup = Tensor::empty(gc.shape(), gc.dtype(), gc.device());
        }
        MICROLLM_KERNEL(gc.device(), swiglu_backward, gc, uc, dy, dgate, dup);
        return std::vector<Tensor>{dgate.to(dtype), dup.to(dtype)};
      });
  return out;
}

}  // namespace microllm::ops
