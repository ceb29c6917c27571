// cross_entropy: validation (targets in range), per-row log-sum-exp, mean over kept rows,
// and the backward (softmax − one-hot) / kept. CPU loops live here; they are short.
#include "microllm/ops/cross_entropy.h"

#include <cmath>

#include "../common.h"
#include "microllm/autograd/node.h"

namespace microllm::ops {

Tensor cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index) {
  detail::check_floating("cross_entropy", logits, "logits");
  detail::check_index("cross_entropy", targets, "targets");
  detail::check_same_device("cross_entropy", logits, "logits", targets, "targets");
  detail::check_cpu("cross_entropy", logits);
  detail::check_rank("cross_entropy", logits, "logits", 2);
  const int64_t N = logits.size(0), V = logits.size(1);
  MICROLLM_CHECK(targets.dim() == 1 && targets.size(0) == N, "cross_entropy",
                 "targets must be (", N, ") for logits ", logits.describe(), ", found ",
                 targets.describe());
  MICROLLM_CHECK(V > 0, "cross_entropy", "logits have no classes: ", logits.describe());
  const Tensor tc = targets.contiguous();
  int64_t kept = 0;
  for (int64_t i = 0; i < N; ++i) {
    const int64_t t = detail::load_index(tc, i);
    if (t == ignore_index) continue;
    MICROLLM_CHECK(t >= 0 && t < V, "cross_entropy", "target ", t, " at row ", i,
                   " is outside [0, ", V, ") and is not ignore_index ", ignore_index);
    ++kept;
  }
  const Tensor lc = detail::cpu_operand(logits.detach());  // (N, V)
  Tensor lse = Tensor::empty({N}, lc.dtype());              // (N) log-sum-exp per row
  Tensor loss = Tensor::empty({}, lc.dtype());
  detail::dispatch_float(lc.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* pl = lc.data<T>();
    T* plse = lse.data<T>();
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < N; ++i) {
      const T* row = pl + i * V;
      T row_max = row[0];
      for (int64_t v = 1; v < V; ++v) row_max = std::max(row_max, row[v]);
      double total = 0.0;
      for (int64_t v = 0; v < V; ++v) total += std::exp(static_cast<double>(row[v] - row_max));
      plse[i] = static_cast<T>(row_max + std::log(total));
    }
    double sum = 0.0;  // fixed order: deterministic
    for (int64_t i = 0; i < N; ++i) {
      const int64_t t = detail::load_index(tc, i);
      if (t != ignore_index) sum += static_cast<double>(plse[i]) - pl[i * V + t];
    }
    loss.data<T>()[0] = static_cast<T>(kept ? sum / static_cast<double>(kept) : 0.0);
  });
  Tensor out = loss.to(logits.dtype());

  autograd::record("cross_entropy", {logits, targets}, {&out},
                   [lc, lse, tc, ignore_index, kept, dtype = logits.dtype()](const std::vector<Tensor>& g) {
    const int64_t N = lc.size(0), V = lc.size(1);
    Tensor dl = Tensor::zeros({N, V}, lc.dtype());
    if (kept > 0) {
      const double scale = g[0].item() / static_cast<double>(kept);
      detail::dispatch_float(lc.dtype(), [&](auto tag) {
        using T = decltype(tag);
        const T* pl = lc.data<T>();
        const T* plse = lse.data<T>();
        T* pd = dl.data<T>();
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < N; ++i) {
          const int64_t t = detail::load_index(tc, i);
          if (t == ignore_index) continue;
          for (int64_t v = 0; v < V; ++v)
            pd[i * V + v] = static_cast<T>(std::exp(static_cast<double>(pl[i * V + v] - plse[i])) * scale);
          pd[i * V + t] -= static_cast<T>(scale);
        }
      });
    }
    return std::vector<Tensor>{dl.to(dtype), Tensor()};
  });
  return out;
}

}  // namespace microllm::ops
