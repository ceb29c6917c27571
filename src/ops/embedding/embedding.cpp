// embedding: validation (every id in range), gather of rows and the scatter-add backward.
// Small enough to keep the CPU loops here; the CUDA kernels get their own file.
#include "microllm/ops/embedding.h"

#include <cstring>

#include "../common.h"
#include "microllm/autograd/node.h"

namespace microllm::ops {

Tensor embedding(const Tensor& weight, const Tensor& ids) {
  detail::check_floating("embedding", weight, "weight");
  detail::check_index("embedding", ids, "ids");
  detail::check_same_device("embedding", weight, "weight", ids, "ids");
  detail::check_cpu("embedding", weight);
  detail::check_rank("embedding", weight, "weight", 2);
  const int64_t V = weight.size(0), C = weight.size(1), N = ids.numel();
  const Tensor idc = ids.contiguous();
  for (int64_t i = 0; i < N; ++i) {
    const int64_t id = detail::load_index(idc, i);
    MICROLLM_CHECK(id >= 0 && id < V, "embedding", "id ", id, " at flat position ", i,
                   " of ids ", ids.describe(), " is outside the vocabulary [0, ", V, ")");
  }
  const Tensor wc = weight.detach().contiguous();
  Shape out_shape = ids.shape();
  out_shape.push_back(C);
  Tensor out = Tensor::empty(out_shape, weight.dtype());  // (..., C)
  const size_t row_bytes = static_cast<size_t>(C) * dtype_size(weight.dtype());
  const char* src = static_cast<const char*>(wc.raw_data());
  char* dst = static_cast<char*>(out.raw_data());
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; ++i)
    std::memcpy(dst + i * row_bytes, src + detail::load_index(idc, i) * row_bytes, row_bytes);

  autograd::record("embedding", {weight, ids}, {&out}, [idc, V, C, dtype = weight.dtype()](const std::vector<Tensor>& g) {
    // dweight[id] += dout[i], in token order (deterministic).
    const Tensor dy = detail::cpu_operand(g[0]).contiguous();  // (N, C)
    Tensor dw = Tensor::zeros({V, C}, dy.dtype());
    detail::dispatch_float(dy.dtype(), [&](auto tag) {
      using T = decltype(tag);
      const T* pdy = dy.data<T>();
      T* pdw = dw.data<T>();
      for (int64_t i = 0; i < idc.numel(); ++i) {
        T* row = pdw + detail::load_index(idc, i) * C;
        for (int64_t c = 0; c < C; ++c) row[c] += pdy[i * C + c];
      }
    });
    return std::vector<Tensor>{dw.to(dtype), Tensor()};
  });
  return out;
}

}  // namespace microllm::ops
