// CPU cross-entropy: per-row log-sum-exp (max subtracted, F64 sums), mean over kept rows.
#include <cmath>

#include "../common.h"
#include "cross_entropy_kernels.h"

namespace microllm::ops {

void cross_entropy_forward_cpu(const Tensor& logits, const Tensor& targets, int64_t ignore_index,
                               int64_t kept, const Tensor& lse, const Tensor& loss) {
  const int64_t N = logits.size(0), V = logits.size(1);
  detail::dispatch_float(logits.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* pl = logits.data<T>();  // (N, V)
    T* plse = lse.data<T>();         // (N)
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < N; ++i) {
      const T* row = pl + i * V;  // (V)
      T row_max = row[0];
      for (int64_t v = 1; v < V; ++v) row_max = std::max(row_max, row[v]);
      double total = 0.0;
      for (int64_t v = 0; v < V; ++v) total += std::exp(static_cast<double>(row[v] - row_max));
      plse[i] = static_cast<T>(row_max + std::log(total));
    }
    double sum = 0.0;  // fixed order: deterministic
    for (int64_t i = 0; i < N; ++i) {
      const int64_t t = detail::load_index(targets, i);
      if (t != ignore_index) sum += static_cast<double>(plse[i]) - pl[i * V + t];
    }
    loss.data<T>()[0] = static_cast<T>(kept ? sum / static_cast<double>(kept) : 0.0);
  });
}

void cross_entropy_backward_cpu(const Tensor& logits, const Tensor& targets, const Tensor& lse,
                                const Tensor& dloss, int64_t ignore_index, int64_t kept,
                                const Tensor& dlogits) {
  const int64_t N = logits.size(0), V = logits.size(1);
  const double scale = kept ? dloss.item() / static_cast<double>(kept) : 0.0;
  detail::dispatch_float(logits.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* pl = logits.data<T>();  // (N, V)
    const T* plse = lse.data<T>();   // (N)
    T* pd = dlogits.data<T>();       // (N, V)
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < N; ++i) {
      const int64_t t = detail::load_index(targets, i);
      T* row = pd + i * V;  // (V)
      if (t == ignore_index) {
        for (int64_t v = 0; v < V; ++v) row[v] = T(0);
        continue;
      }
      for (int64_t v = 0; v < V; ++v)
        row[v] = static_cast<T>(std::exp(static_cast<double>(pl[i * V + v] - plse[i])) * scale);
      row[t] -= static_cast<T>(scale);
    }
  });
}

// The backward reads each element before it writes it, and the forward has read the row's
// targets before, so dlogits may alias logits.
void cross_entropy_forward_grad_cpu(const Tensor& logits, const Tensor& targets,
                                    int64_t ignore_index, int64_t kept, const Tensor& lse,
                                    const Tensor& loss, const Tensor& dlogits) {
  cross_entropy_forward_cpu(logits, targets, ignore_index, kept, lse, loss);
  const Tensor one = Tensor::full({}, 1.0, lse.dtype(), lse.device());  // () dloss = 1
  cross_entropy_backward_cpu(logits, targets, lse, one, ignore_index, kept, dlogits);
}

}  // namespace microllm::ops
