// CPU embedding: a row copy per token forward, a row accumulation per token backward.
#include <cstring>

#include "../common.h"
#include "embedding_kernels.h"

namespace microllm::ops {

void embedding_forward_cpu(const Tensor& weight, const Tensor& ids, const Tensor& out) {
  const int64_t N = ids.numel();
  const size_t row_bytes = static_cast<size_t>(weight.size(1)) * dtype_size(weight.dtype());
  const char* src = static_cast<const char*>(weight.raw_data());  // (V, C)
  char* dst = static_cast<char*>(out.raw_data());                 // (N, C)
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; ++i)
    std::memcpy(dst + i * row_bytes, src + detail::load_index(ids, i) * row_bytes, row_bytes);
}

void embedding_backward_cpu(const Tensor& dout, const Tensor& ids, const Tensor& dweight) {
  const int64_t N = ids.numel(), C = dweight.size(1);
  detail::dispatch_float(dout.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* pdy = dout.data<T>();  // (N, C)
    T* pdw = dweight.data<T>();     // (V, C)
    for (int64_t i = 0; i < N; ++i) {
      T* row = pdw + detail::load_index(ids, i) * C;
      for (int64_t c = 0; c < C; ++c) row[c] += pdy[i * C + c];
    }
  });
}

}  // namespace microllm::ops
