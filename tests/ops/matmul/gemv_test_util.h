// Shared by the decode GEMV tests (test_gemv.cpp, test_gemv_cuda.cpp): the error measure and
// the magnitudes it is relative to.
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

#include "microllm/core/tensor.h"

namespace microllm::testing::gemv {

// Largest |got − want| / (magnitude + 1e-30) over the elements; with magnitude Σ_k |x_k|·|w_k|
// this bounds any summation order's rounding error.
inline double worst_error(const Tensor& got, const Tensor& want, const Tensor& magnitude) {
  const std::vector<double> g = got.to_vector_f64(), w = want.to_vector_f64(),
                            m = magnitude.to_vector_f64();
  double worst = 0.0;
  for (size_t i = 0; i < g.size(); ++i)
    worst = std::max(worst, std::fabs(g[i] - w[i]) / (m[i] + 1e-30));
  return worst;
}

// |t| element-wise, as a CPU tensor of `dtype` (exact: |x| needs no rounding).
inline Tensor abs_values(const Tensor& t, DType dtype) {
  std::vector<double> v = t.to(Device::cpu()).to_vector_f64();
  for (double& x : v) x = std::fabs(x);
  return Tensor::from_vector(v, t.shape(), dtype);
}

}  // namespace microllm::testing::gemv
