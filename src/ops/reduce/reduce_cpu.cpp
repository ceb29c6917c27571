// CPU reductions: one pass over the reduced dimension per output, accumulating in F64.
#include "../common.h"
#include "reduce_kernels.h"

namespace microllm::ops {

void reduce_forward_cpu(ReduceOp op, const Tensor& x, int64_t outer, int64_t n, int64_t inner,
                        const Tensor& out) {
  detail::dispatch_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* px = x.data<T>();                                                  // (outer, n, inner)
    T* values = op == ReduceOp::Argmax ? nullptr : out.data<T>();               // (outer, inner)
    int64_t* indices = op == ReduceOp::Argmax ? out.data<int64_t>() : nullptr;  // (outer, inner)
#pragma omp parallel for collapse(2) schedule(static)
    for (int64_t o = 0; o < outer; ++o) {
      for (int64_t i = 0; i < inner; ++i) {
        const T* row = px + o * n * inner + i;
        if (op == ReduceOp::Sum) {
          double acc = 0.0;
          for (int64_t k = 0; k < n; ++k) acc += row[k * inner];
          values[o * inner + i] = static_cast<T>(acc);
          continue;
        }
        // Max / Argmax: the first largest value wins; NaN counts as largest (as PyTorch).
        int64_t best = 0;
        for (int64_t k = 1; k < n; ++k) {
          const T v = row[k * inner], b = row[best * inner];
          if (v > b || (v != v && b == b)) best = k;
        }
        if (op == ReduceOp::Max)
          values[o * inner + i] = row[best * inner];
        else
          indices[o * inner + i] = best;
      }
    }
  });
}

void scatter_along_dim_cpu(const Tensor& grad, const Tensor& index, int64_t outer, int64_t n,
                           int64_t inner, const Tensor& grad_x) {
  detail::dispatch_float(grad.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* pg = grad.data<T>();               // (outer, inner)
    const int64_t* pi = index.data<int64_t>();  // (outer, inner)
    T* px = grad_x.data<T>();                   // (outer, n, inner), zero-filled
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t i = 0; i < inner; ++i)
        px[(o * n + pi[o * inner + i]) * inner + i] = pg[o * inner + i];
  });
}

}  // namespace microllm::ops
