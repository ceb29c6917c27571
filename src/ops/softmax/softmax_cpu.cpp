// CPU softmax / log-softmax over the last dimension, stable: the row max is subtracted
// before exponentiation, sums accumulate in F64.
#include <cmath>

#include "../common.h"
#include "softmax_kernels.h"

namespace microllm::ops {

void softmax_forward_cpu(const Tensor& x, const Tensor& y, bool log) {
  const int64_t n = x.size(-1), rows = n ? x.numel() / n : 0;
  detail::dispatch_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* px = x.data<T>();  // (R, N)
    T* py = y.data<T>();        // (R, N)
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      const T* xr = px + r * n;
      T* yr = py + r * n;
      T row_max = xr[0];
      for (int64_t i = 1; i < n; ++i) row_max = std::max(row_max, xr[i]);
      double total = 0.0;
      for (int64_t i = 0; i < n; ++i) total += std::exp(static_cast<double>(xr[i] - row_max));
      if (log) {
        const T log_total = static_cast<T>(std::log(total));
        for (int64_t i = 0; i < n; ++i) yr[i] = xr[i] - row_max - log_total;
      } else {
        for (int64_t i = 0; i < n; ++i)
          yr[i] = static_cast<T>(std::exp(static_cast<double>(xr[i] - row_max)) / total);
      }
    }
  });
}

void softmax_backward_cpu(const Tensor& y, const Tensor& dy, const Tensor& dx, bool log) {
  const int64_t n = y.size(-1), rows = n ? y.numel() / n : 0;
  detail::dispatch_float(y.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* py = y.data<T>();
    const T* pdy = dy.data<T>();
    T* pdx = dx.data<T>();
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      const T* yr = py + r * n;
      const T* dyr = pdy + r * n;
      T* dxr = pdx + r * n;
      double dot = 0.0;  // Σ dy·y (softmax) or Σ dy (log-softmax)
      for (int64_t i = 0; i < n; ++i) dot += log ? dyr[i] : static_cast<double>(dyr[i]) * yr[i];
      for (int64_t i = 0; i < n; ++i)
        dxr[i] = log ? static_cast<T>(dyr[i] - std::exp(static_cast<double>(yr[i])) * dot)
                     : static_cast<T>(yr[i] * (dyr[i] - dot));
    }
  });
}

}  // namespace microllm::ops
