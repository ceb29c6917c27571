// Elementwise operators: validation, dispatch and backward; add_out, the allocation-free add.
#include "microllm/ops/elementwise.h"

#include "../common.h"
#include "elementwise_kernels.h"
#include "microllm/autograd/node.h"
#include "microllm/ops/reduce.h"

namespace microllm::ops {
namespace {

const char* binary_name(BinaryOp op) {
  switch (op) {
    case BinaryOp::Add:
      return "add";
    case BinaryOp::Sub:
      return "sub";
    case BinaryOp::Mul:
      return "mul";
    case BinaryOp::Div:
      return "div";
  }
  return "binary";
}

const char* unary_name(UnaryOp op) {
  switch (op) {
    case UnaryOp::Neg:
      return "neg";
    case UnaryOp::Scale:
      return "scale";
    case UnaryOp::AddScalar:
      return "add_scalar";
    case UnaryOp::Pow:
      return "pow";
    case UnaryOp::Exp:
      return "exp";
    case UnaryOp::Log:
      return "log";
    case UnaryOp::Sqrt:
      return "sqrt";
    case UnaryOp::Rsqrt:
      return "rsqrt";
  }
  return "unary";
}

// Runs a binary kernel on broadcast views; no autograd.
Tensor binary_compute(BinaryOp op, const Tensor& a, const Tensor& b) {
  const char* name = binary_name(op);
  detail::check_floating(name, a, "a");
  detail::check_floating(name, b, "b");
  detail::check_same_dtype(name, a, "a", b, "b");
  detail::check_same_device(name, a, "a", b, "b");
  const Shape shape = broadcast_shapes(a.shape(), b.shape(), name);
  const Tensor ac = detail::compute_operand(a.detach()).expand(shape);
  const Tensor bc = detail::compute_operand(b.detach()).expand(shape);
  Tensor out = Tensor::empty(shape, ac.dtype(), a.device());
  MICROLLM_KERNEL(a.device(), binary_forward, op, ac, bc, out);
  return out.to(a.dtype());
}

Tensor unary_compute(UnaryOp op, double param, const Tensor& x) {
  const char* name = unary_name(op);
  detail::check_floating(name, x, "x");
  const Tensor xc = x.is_cuda() ? x.detach() : detail::compute_operand(x.detach());
  Tensor out = Tensor::empty(x.shape(), x.is_cuda() ? x.dtype() : xc.dtype(), x.device());
  MICROLLM_KERNEL(x.device(), unary_forward, op, param, xc, out);
  return out.to(x.dtype());
}

}  // namespace

Tensor add(const Tensor& a, const Tensor& b) {
  Tensor out = binary_compute(BinaryOp::Add, a, b);
  autograd::record("add", {a, b}, {&out},
                   [sa = a.shape(), sb = b.shape()](const std::vector<Tensor>& g) {
                     return std::vector<Tensor>{sum_to_shape(g[0], sa), sum_to_shape(g[0], sb)};
                   });
  return out;
}

void add_out(const Tensor& a, const Tensor& b, const Tensor& out) {
  const char* op = "add_out";
  detail::check_floating(op, a, "a");
  detail::check_floating(op, b, "b");
  detail::check_same_dtype(op, a, "a", b, "b");
  detail::check_same_device(op, a, "a", b, "b");
  detail::check_out_dtype(op, a, "a");
  MICROLLM_CHECK(a.shape() == b.shape(), op, "a ", a.describe(), " and b ", b.describe(),
                 " must have the same shape (add_out does not broadcast)");
  detail::check_out_tensor(op, out, "out", a, "a");
  detail::check_out_shape(op, out, "out", a, "a");
  detail::check_apart_or_same(op, out, "out", a, "a");
  detail::check_apart_or_same(op, out, "out", b, "b");
  // add's kernel; it reads a and b through their strides.
  MICROLLM_KERNEL(a.device(), binary_forward, BinaryOp::Add, a, b, out);
}

Tensor sub(const Tensor& a, const Tensor& b) {
  Tensor out = binary_compute(BinaryOp::Sub, a, b);
  autograd::record(
      "sub", {a, b}, {&out}, [sa = a.shape(), sb = b.shape()](const std::vector<Tensor>& g) {
        return std::vector<Tensor>{sum_to_shape(g[0], sa), sum_to_shape(neg(g[0]), sb)};
      });
  return out;
}

Tensor mul(const Tensor& a, const Tensor& b) {
  Tensor out = binary_compute(BinaryOp::Mul, a, b);
  autograd::record("mul", {a, b}, {&out},
                   [a = a.detach(), b = b.detach()](const std::vector<Tensor>& g) {
                     return std::vector<Tensor>{sum_to_shape(mul(g[0], b), a.shape()),
                                                sum_to_shape(mul(g[0], a), b.shape())};
                   });
  return out;
}

Tensor div(const Tensor& a, const Tensor& b) {
  Tensor out = binary_compute(BinaryOp::Div, a, b);
  autograd::record("div", {a, b}, {&out},
                   [a = a.detach(), b = b.detach()](const std::vector<Tensor>& g) {
                     // d(a/b)/da = 1/b; d(a/b)/db = -a/b²
                     Tensor grad_a = div(g[0], b);
                     Tensor grad_b = neg(div(mul(grad_a, a), b));
                     return std::vector<Tensor>{sum_to_shape(grad_a, a.shape()),
                                                sum_to_shape(grad_b, b.shape())};
                   });
  return out;
}

Tensor neg(const Tensor& x) {
  Tensor out = unary_compute(UnaryOp::Neg, 0.0, x);
  autograd::record("neg", {x}, {&out},
                   [](const std::vector<Tensor>& g) { return std::vector<Tensor>{neg(g[0])}; });
  return out;
}

Tensor scale(const Tensor& x, double factor) {
  Tensor out = unary_compute(UnaryOp::Scale, factor, x);
  autograd::record("scale", {x}, {&out}, [factor](const std::vector<Tensor>& g) {
    return std::vector<Tensor>{scale(g[0], factor)};
  });
  return out;
}

Tensor add_scalar(const Tensor& x, double value) {
  Tensor out = unary_compute(UnaryOp::AddScalar, value, x);
  autograd::record("add_scalar", {x}, {&out},
                   [](const std::vector<Tensor>& g) { return std::vector<Tensor>{g[0]}; });
  return out;
}

Tensor pow(const Tensor& x, double exponent) {
  Tensor out = unary_compute(UnaryOp::Pow, exponent, x);
  autograd::record("pow", {x}, {&out}, [x = x.detach(), exponent](const std::vector<Tensor>& g) {
    // d(x^p)/dx = p · x^(p-1); zero for p = 0 (x^-1 would give 0·inf = NaN at x = 0).
    if (exponent == 0.0)
      return std::vector<Tensor>{Tensor::zeros(x.shape(), g[0].dtype(), g[0].device())};
    return std::vector<Tensor>{mul(g[0], scale(pow(x, exponent - 1.0), exponent))};
  });
  return out;
}

Tensor exp(const Tensor& x) {
  Tensor out = unary_compute(UnaryOp::Exp, 0.0, x);
  autograd::record("exp", {x}, {&out}, [y = out.detach()](const std::vector<Tensor>& g) {
    return std::vector<Tensor>{mul(g[0], y)};
  });
  return out;
}

Tensor log(const Tensor& x) {
  Tensor out = unary_compute(UnaryOp::Log, 0.0, x);
  autograd::record("log", {x}, {&out}, [x = x.detach()](const std::vector<Tensor>& g) {
    return std::vector<Tensor>{div(g[0], x)};
  });
  return out;
}

Tensor sqrt(const Tensor& x) {
  Tensor out = unary_compute(UnaryOp::Sqrt, 0.0, x);
  autograd::record("sqrt", {x}, {&out}, [y = out.detach()](const std::vector<Tensor>& g) {
    // d sqrt(x)/dx = 1 / (2 sqrt(x))
    return std::vector<Tensor>{scale(div(g[0], y), 0.5)};
  });
  return out;
}

Tensor rsqrt(const Tensor& x) {
  Tensor out = unary_compute(UnaryOp::Rsqrt, 0.0, x);
  autograd::record("rsqrt", {x}, {&out}, [y = out.detach()](const std::vector<Tensor>& g) {
    // d x^(-1/2)/dx = -1/2 · x^(-3/2) = -1/2 · y³
    return std::vector<Tensor>{mul(g[0], scale(pow(y, 3.0), -0.5))};
  });
  return out;
}

}  // namespace microllm::ops
