// CPU index_select: row copies forward, row accumulation backward.
#include <cstring>

#include "../common.h"
#include "index_select_kernels.h"

namespace microllm::ops {

void index_select_forward_cpu(const Tensor& x, const Tensor& index, int64_t outer, int64_t n,
                              int64_t inner, const Tensor& out) {
  const int64_t K = index.numel();
  const size_t row_bytes = static_cast<size_t>(inner) * dtype_size(x.dtype());
  const char* src = static_cast<const char*>(x.raw_data());  // (outer, n, inner)
  char* dst = static_cast<char*>(out.raw_data());            // (outer, K, inner)
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t k = 0; k < K; ++k)
      std::memcpy(dst + (o * K + k) * row_bytes,
                  src + (o * n + detail::load_index(index, k)) * row_bytes, row_bytes);
}

void index_select_backward_cpu(const Tensor& dout, const Tensor& index, int64_t outer, int64_t n,
                               int64_t inner, const Tensor& dx) {
  const int64_t K = index.numel();
  detail::dispatch_float(dout.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* pdy = dout.data<T>();  // (outer, K, inner)
    T* pdx = dx.data<T>();          // (outer, n, inner)
#pragma omp parallel for schedule(static)
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t k = 0; k < K; ++k) {
        const int64_t id = detail::load_index(index, k);
        for (int64_t i = 0; i < inner; ++i)
          pdx[(o * n + id) * inner + i] += pdy[(o * K + k) * inner + i];
      }
  });
}

}  // namespace microllm::ops
