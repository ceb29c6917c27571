// CPU RMSNorm forward and backward, one row per iteration; row sums accumulate in F64.
//
// With x̂ = x·rstd and g = dy·weight:  dx = rstd·(g − x̂·mean(g·x̂)),  dweight = Σ_rows dy·x̂.
#include <cmath>
#include <vector>

#include "../common.h"
#include "microllm/ops/elementwise.h"
#include "rms_norm_kernels.h"

namespace microllm::ops {

void rms_norm_forward_cpu(const Tensor& x, const Tensor& weight, double eps, const Tensor& y,
                          const Tensor& rstd) {
  const int64_t n = x.size(-1), rows = x.numel() / n;
  detail::dispatch_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* px = x.data<T>();                          // (R, C)
    const T* pw = weight.data<T>();                     // (C)
    T* py = y.data<T>();                                // (R, C)
    T* pr = rstd.defined() ? rstd.data<T>() : nullptr;  // (R), or nothing to save
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      const T* xr = px + r * n;
      double sum_sq = 0.0;
      for (int64_t i = 0; i < n; ++i) sum_sq += static_cast<double>(xr[i]) * xr[i];
      const T inv = static_cast<T>(1.0 / std::sqrt(sum_sq / static_cast<double>(n) + eps));
      if (pr) pr[r] = inv;
      for (int64_t i = 0; i < n; ++i) py[r * n + i] = pw[i] * (xr[i] * inv);
    }
  });
}

void add_rms_norm_forward_cpu(const Tensor& x, const Tensor& residual, const Tensor& weight,
                              double eps, const Tensor& sum, const Tensor& y, const Tensor& rstd) {
  add_out(x, residual, sum);
  rms_norm_forward_cpu(sum, weight, eps, y, rstd);
}

void rms_norm_backward_cpu(const Tensor& x, const Tensor& weight, const Tensor& rstd,
                           const Tensor& dy, const Tensor& dresidual, const Tensor& dx,
                           const Tensor& dweight) {
  const int64_t n = x.size(-1), rows = x.numel() / n;
  detail::dispatch_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* px = x.data<T>();
    const T* pw = weight.data<T>();
    const T* pr = rstd.data<T>();
    const T* pdy = dy.data<T>();
    const T* pdr = dresidual.defined() ? dresidual.data<T>() : nullptr;  // (R, C) or none
    T* pdx = dx.data<T>();
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      const T* xr = px + r * n;
      const T* dyr = pdy + r * n;
      const double inv = pr[r];
      double dot = 0.0;  // Σ (dy·w)·x̂
      for (int64_t i = 0; i < n; ++i) dot += static_cast<double>(dyr[i]) * pw[i] * xr[i] * inv;
      const double mean_dot = dot / static_cast<double>(n);
      for (int64_t i = 0; i < n; ++i) {
        const T d =
            static_cast<T>(inv * (static_cast<double>(dyr[i]) * pw[i] - xr[i] * inv * mean_dot));
        pdx[r * n + i] = pdr ? static_cast<T>(d + pdr[r * n + i]) : d;  // add's T arithmetic
      }
    }
    // dweight: column sums, fixed order (deterministic).
    T* pdw = dweight.data<T>();
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) {
      double acc = 0.0;
      for (int64_t r = 0; r < rows; ++r)
        acc += static_cast<double>(pdy[r * n + i]) * px[r * n + i] * pr[r];
      pdw[i] = static_cast<T>(acc);
    }
  });
}

}  // namespace microllm::ops
