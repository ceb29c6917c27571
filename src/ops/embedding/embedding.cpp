// embedding: validation (every id in range), dispatch and the scatter-add backward.
#include "microllm/ops/embedding.h"

#include "../common.h"
#include "embedding_kernels.h"
#include "microllm/autograd/node.h"

namespace microllm::ops {

Tensor embedding(const Tensor& weight, const Tensor& ids) {
  detail::check_floating("embedding", weight, "weight");
  detail::check_index("embedding", ids, "ids");
  detail::check_same_device("embedding", weight, "weight", ids, "ids");
  detail::check_rank("embedding", weight, "weight", 2);
  const int64_t V = weight.size(0), C = weight.size(1);
  detail::check_index_range("embedding", ids, V, "id", "flat position", weight);
  const Device device = weight.device();
  const Tensor idc = ids.contiguous();             // (...), e.g. (B, T)
  const Tensor wc = weight.detach().contiguous();  // (V, C)
  Shape out_shape = ids.shape();
  out_shape.push_back(C);
  Tensor out = Tensor::empty(out_shape, weight.dtype(), device);  // (..., C)
  MICROLLM_KERNEL(device, embedding_forward, wc, idc, out);

  autograd::record("embedding", {weight, ids}, {&out},
                   [idc, V, C, dtype = weight.dtype()](const std::vector<Tensor>& g) {
                     // Accumulate in F32 (F64 for F64 weights), then store in the weight's dtype.
                     const DType acc = detail::stat_dtype(dtype);
                     const Tensor dy = g[0].is_cuda() ? g[0].contiguous()
                                                      : g[0].to(acc).contiguous();  // (..., C)
                     Tensor dw = Tensor::zeros({V, C}, acc, dy.device());           // (V, C)
                     MICROLLM_KERNEL(dy.device(), embedding_backward, dy, idc, dw);
                     return std::vector<Tensor>{dw.to(dtype), Tensor()};
                   });
  return out;
}

}  // namespace microllm::ops
