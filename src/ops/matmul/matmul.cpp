// matmul / linear: validation, dispatch and backward; matmul_out, matmul into a given tensor
// (linear's weight gradient into its claimed buffer); linear_out, the allocation-free linear
// on the same GEMM and bias kernels; matmul_naive, the loop reference.
#include "microllm/ops/matmul.h"

#include "../common.h"
#include "matmul_kernels.h"
#include "microllm/autograd/gradient_buffer.h"
#include "microllm/autograd/node.h"
#include "microllm/ops/elementwise.h"
#include "microllm/ops/gemm_mode.h"
#include "microllm/ops/reduce.h"

namespace microllm::ops {
namespace {

struct MatmulShape {
  GemmProblem problem;
  Shape out_shape;  // (M, N) or (B, M, N)
};

MatmulShape matmul_shape(const char* op, const Tensor& a, const Tensor& b, bool trans_a,
                         bool trans_b) {
  detail::check_floating(op, a, "a");
  detail::check_floating(op, b, "b");
  detail::check_same_dtype(op, a, "a", b, "b");
  detail::check_same_device(op, a, "a", b, "b");
  MICROLLM_CHECK((a.dim() == 2 || a.dim() == 3) && (b.dim() == 2 || b.dim() == 3), op,
                 "operands must have rank 2 or 3, found a ", a.describe(), " and b ", b.describe());
  const int64_t m = trans_a ? a.size(-1) : a.size(-2);
  const int64_t ka = trans_a ? a.size(-2) : a.size(-1);
  const int64_t kb = trans_b ? b.size(-1) : b.size(-2);
  const int64_t n = trans_b ? b.size(-2) : b.size(-1);
  MICROLLM_CHECK(ka == kb, op, "inner dimensions differ: a ", shape_str(a.shape()),
                 trans_a ? " (transposed)" : "", " has K=", ka, ", b ", shape_str(b.shape()),
                 trans_b ? " (transposed)" : "", " has K=", kb);
  const int64_t batch_a = a.dim() == 3 ? a.size(0) : 1;
  const int64_t batch_b = b.dim() == 3 ? b.size(0) : 1;
  MICROLLM_CHECK(a.dim() == 2 || b.dim() == 2 || batch_a == batch_b, op, "batch sizes differ: a ",
                 shape_str(a.shape()), ", b ", shape_str(b.shape()));
  const int64_t batch = std::max(batch_a, batch_b);
  const bool batched = a.dim() == 3 || b.dim() == 3;
  return {{batch, m, n, ka, trans_a, trans_b}, batched ? Shape{batch, m, n} : Shape{m, n}};
}

// (rows, cols) or (B, rows, cols) → (B or 1, rows, cols) view.
Tensor as_batched(const Tensor& t) { return t.dim() == 3 ? t : t.unsqueeze(0); }

// out3 (batch, M, N), dense, of a's dtype and device = op(a)·op(b) (+ bias per column); no
// autograd.
void gemm_into(const MatmulShape& s, const Tensor& a, const Tensor& b, const Tensor& bias,
               const Tensor& out3) {
  const GemmProblem& p = s.problem;
  // a3, b3: (batch or 1, rows, cols)
  const Tensor a3 = as_batched(a.detach()), b3 = as_batched(b.detach());
  Tensor out = out3;  // a second handle (fill and copy_from are not const)
  if (a.is_cuda()) {
#if MICROLLM_WITH_CUDA
    if (p.k == 0) {
      out.fill(0.0);
      if (bias.defined()) out.copy_from(ops::add(out, bias.detach()));
    } else if (out.numel() > 0) {
      gemm_cuda(p, a3, b3, bias.defined() ? bias.detach().contiguous() : Tensor(), out);
    }
    return;
#endif
  }
  // CPU: BLAS in F32/F64 (BF16/F16 widened, the product then rounded into out), then the
  // bias row added.
  const Tensor aw = a3.to(detail::cpu_compute_dtype(a3.dtype()));  // (batch or 1, rows, cols)
  const Tensor bw = b3.to(aw.dtype());                             // (batch or 1, rows, cols)
  // (batch, M, N) in the compute dtype: out itself when it has it
  Tensor acc = out.dtype() == aw.dtype() ? out : Tensor::empty({p.batch, p.m, p.n}, aw.dtype());
  if (p.k == 0)
    acc.fill(0.0);
  else if (acc.numel() > 0)
    gemm_cpu(p, aw, bw, acc);
  if (bias.defined()) add_bias_rows_cpu(acc, bias.detach().to(aw.dtype()).contiguous());
  if (!acc.same(out)) out.copy_from(acc);
}

// The product in a new (batch, M, N) tensor (see gemm_into).
Tensor gemm_forward(const MatmulShape& s, const Tensor& a, const Tensor& b, const Tensor& bias) {
  const GemmProblem& p = s.problem;
  Tensor out = Tensor::empty({p.batch, p.m, p.n}, a.dtype(), a.device());  // (batch, M, N)
  gemm_into(s, a, b, bias, out);
  return out;
}

void check_linear_args(const char* op, const Tensor& x, const Tensor& weight, const Tensor& bias) {
  detail::check_floating(op, x, "x");
  detail::check_floating(op, weight, "weight");
  detail::check_same_dtype(op, x, "x", weight, "weight");
  detail::check_same_device(op, x, "x", weight, "weight");
  MICROLLM_CHECK(x.dim() >= 1 && weight.dim() == 2 && x.size(-1) == weight.size(1), op,
                 "expected x (..., in) and weight (out, in), found x ", x.describe(),
                 " and weight ", weight.describe());
  if (bias.defined()) {
    detail::check_floating(op, bias, "bias");
    detail::check_same_dtype(op, x, "x", bias, "bias");
    detail::check_same_device(op, x, "x", bias, "bias");
    MICROLLM_CHECK(bias.dim() == 1 && bias.size(0) == weight.size(0), op, "bias must be (",
                   weight.size(0), "), found ", bias.describe());
  }
}

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b, bool trans_a, bool trans_b) {
  const MatmulShape s = matmul_shape("matmul", a, b, trans_a, trans_b);
  Tensor out = gemm_forward(s, a, b, Tensor()).reshape(s.out_shape);  // (M, N) or (B, M, N)
  autograd::record(
      "matmul", {a, b}, {&out},
      [a = a.detach(), b = b.detach(), trans_a, trans_b](const std::vector<Tensor>& g) {
        const Tensor& dc = g[0];  // (M, N) or (B, M, N)
        // With A' = op(A), B' = op(B): dA' = dC·B'ᵀ and dB' = A'ᵀ·dC. da, db: shapes of a, b (plus
        // a leading batch dimension when the other operand was batched, summed away below).
        Tensor da = trans_a ? matmul(b, dc, trans_b, true) : matmul(dc, b, false, !trans_b);
        Tensor db = trans_b ? matmul(dc, a, true, trans_a) : matmul(a, dc, !trans_a, false);
        // A 2-D operand was shared across the batch: sum its gradient over it.
        if (da.dim() > a.dim()) da = sum(da, 0, false);
        if (db.dim() > b.dim()) db = sum(db, 0, false);
        return std::vector<Tensor>{da, db};
      });
  return out;
}

void matmul_out(const Tensor& a, const Tensor& b, bool trans_a, bool trans_b, const Tensor& out) {
  const char* op = "matmul_out";
  const MatmulShape s = matmul_shape(op, a, b, trans_a, trans_b);
  detail::check_out_tensor(op, out, "out", a, "a");
  MICROLLM_CHECK(out.shape() == s.out_shape, op, "'out' ", out.describe(), " must have shape ",
                 shape_str(s.out_shape));
  detail::check_apart(op, out, "out", a, "a");
  detail::check_apart(op, out, "out", b, "b");
  const GemmProblem& p = s.problem;
  // (batch, M, N) view of out's memory
  gemm_into(s, a, b, Tensor(),
            Tensor::from_storage(out.storage(), {p.batch, p.m, p.n}, {p.m * p.n, p.n, 1},
                                 out.offset(), out.dtype()));
}

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  check_linear_args("linear", x, weight, bias);
  Shape out_shape = x.shape();
  out_shape.back() = weight.size(0);
  const Tensor x2 = x.detach().reshape({-1, x.size(-1)});  // (N, in)
  const MatmulShape s = matmul_shape("linear", x2, weight, false, true);
  // One GEMM with the bias in its epilogue (cuBLASLt) or added right after (CPU).
  Tensor out = gemm_forward(s, x2, weight, bias).reshape(out_shape);  // (..., out)
  // The weight's handle (not detached) is kept only to claim its gradient buffer.
  const Tensor claim_from = autograd::gradient_claims_enabled() ? weight : Tensor();
  autograd::record("linear", {x, weight, bias}, {&out},
                   [x2, w = weight.detach(), claim_from, x_shape = x.shape(),
                    has_bias = bias.defined()](const std::vector<Tensor>& g) {
                     const Tensor dy = g[0].reshape({-1, w.size(0)});           // (N, out)
                     Tensor dx = matmul(dy, w, false, false).reshape(x_shape);  // (..., in)
                     // dW straight into the weight's gradient buffer where it can be claimed
                     // (autograd/gradient_buffer.h); the same values either way.
                     Tensor dw = autograd::claim_gradient_buffer(claim_from);  // (out, in)
                     if (dw.defined())
                       matmul_out(dy, x2, true, false, dw);
                     else
                       dw = matmul(dy, x2, true, false);
                     Tensor db = has_bias ? sum(dy, 0, false) : Tensor();  // (out)
                     return std::vector<Tensor>{dx, dw, db};
                   });
  return out;
}

void linear_out(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& out) {
  const char* op = "linear_out";
  check_linear_args(op, x, weight, bias);
  detail::check_out_dtype(op, x, "x");
  detail::check_dense(op, x, "x");
  detail::check_dense(op, weight, "weight");
  if (bias.defined()) detail::check_dense(op, bias, "bias");
  detail::check_out_tensor(op, out, "out", x, "x");
  detail::check_out_shape(op, out, "out", x, x.dim() - 1, weight.size(0));
  detail::check_apart(op, out, "out", x, "x");
  detail::check_apart(op, out, "out", weight, "weight");
  detail::check_apart(op, out, "out", bias, "bias");
  const int64_t K = x.size(-1), N = weight.size(0);
  MICROLLM_CHECK(K > 0, op, "expected at least one input feature, found x ", x.describe());
  int64_t M = 1;  // rows of x: every dimension but the last
  for (int64_t d = 0; d + 1 < x.dim(); ++d) M *= x.size(d);
  // linear hands BLAS / cuBLASLt the view x.reshape({-1, K}) of x: for dense x its strides
  // are (K, 1), or (1, 1) for one row. Reading x with those strides makes the same GEMM call,
  // hence the same values.
  const int64_t x_row_stride = M == 1 ? 1 : K;
  const GemmProblem p{1, M, N, K, false, true};
  if (M * N == 0) return;
  if (x.is_cuda()) {
#if MICROLLM_WITH_CUDA
    // (1, rows, cols) views of the same memory: host-side handles, no device memory.
    const auto matrix = [](const Tensor& t, int64_t rows, int64_t cols, int64_t row_stride) {
      return Tensor::from_storage(t.storage(), {1, rows, cols}, {rows * row_stride, row_stride, 1},
                                  t.offset(), t.dtype());
    };
    gemm_cuda(p, matrix(x, M, K, x_row_stride),
              Tensor::from_storage(weight.storage(), {1, N, K},
                                   {N * weight.stride(0), weight.stride(0), weight.stride(1)},
                                   weight.offset(), weight.dtype()),
              bias, matrix(out, M, N, N));
    return;
#endif
  }
  if (gemm_mode() == GemmMode::batch_invariant) {
    // The fixed-order kernel (gemm_cpu_invariant.cpp): a row's values do not depend on M.
    gemm_cpu_batch_invariant(
        p,
        Tensor::from_storage(x.storage(), {1, M, K}, {M * x_row_stride, x_row_stride, 1},
                             x.offset(), x.dtype()),
        Tensor::from_storage(weight.storage(), {1, N, K},
                             {N * weight.stride(0), weight.stride(0), weight.stride(1)},
                             weight.offset(), weight.dtype()),
        Tensor::from_storage(out.storage(), {1, M, N}, {M * N, N, 1}, out.offset(), out.dtype()));
    if (bias.defined()) add_bias_rows_cpu(out, bias);
    return;
  }
  bool x_transposed = false, w_transposed = true;
  int64_t x_ld = 0, w_ld = 0;
  // Dense operands always have a BLAS layout.
  blas_layout(M, K, x_row_stride, 1, x_transposed, x_ld);
  blas_layout(N, K, weight.stride(0), weight.stride(1), w_transposed, w_ld);
  gemm_operands_cpu(p, x.dtype(), {x.raw_data(), x_transposed, x_ld, 0},
                    {weight.raw_data(), w_transposed, w_ld, 0}, out.raw_data());
  if (bias.defined()) add_bias_rows_cpu(out, bias);
}

Tensor matmul_naive(const Tensor& a, const Tensor& b, bool trans_a, bool trans_b) {
  const MatmulShape s = matmul_shape("matmul_naive", a, b, trans_a, trans_b);
  const GemmProblem& p = s.problem;
  // ah, bh: (batch or 1, rows, cols) F64
  const Tensor ah = as_batched(a.detach()).to(Device::cpu()).to(DType::F64).contiguous();
  const Tensor bh = as_batched(b.detach()).to(Device::cpu()).to(DType::F64).contiguous();
  Tensor out = Tensor::empty({p.batch, p.m, p.n}, DType::F64);  // (batch, M, N)
  const double* pa = ah.data<double>();
  const double* pb = bh.data<double>();
  double* pc = out.data<double>();
  const int64_t a_rows = ah.size(1), a_cols = ah.size(2), b_rows = bh.size(1), b_cols = bh.size(2);
  for (int64_t batch = 0; batch < p.batch; ++batch) {
    const double* ab = pa + (ah.size(0) == 1 ? 0 : batch * a_rows * a_cols);
    const double* bb = pb + (bh.size(0) == 1 ? 0 : batch * b_rows * b_cols);
    for (int64_t i = 0; i < p.m; ++i)
      for (int64_t j = 0; j < p.n; ++j) {
        double acc = 0.0;
        for (int64_t k = 0; k < p.k; ++k) {
          const double av = trans_a ? ab[k * a_cols + i] : ab[i * a_cols + k];
          const double bv = trans_b ? bb[j * b_cols + k] : bb[k * b_cols + j];
          acc += av * bv;
        }
        pc[(batch * p.m + i) * p.n + j] = acc;
      }
  }
  return out.reshape(s.out_shape).to(a.dtype()).to(a.device());
}

}  // namespace microllm::ops
