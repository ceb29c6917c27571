// embedding: validation (every id in range), dispatch and the scatter-add backward;
// embedding_out, the allocation-free form, runs the same forward kernel.
#include "microllm/ops/embedding.h"

#include "../common.h"
#include "embedding_kernels.h"
#include "microllm/autograd/gradient_buffer.h"
#include "microllm/autograd/node.h"

namespace microllm::ops {

void embedding_out(const Tensor& weight, const Tensor& ids, const Tensor& out) {
  const char* op = "embedding_out";
  detail::check_floating(op, weight, "weight");
  detail::check_index(op, ids, "ids");
  detail::check_same_device(op, weight, "weight", ids, "ids");
  detail::check_rank(op, weight, "weight", 2);
  detail::check_dense(op, weight, "weight");
  detail::check_dense(op, ids, "ids");
  detail::check_out_tensor(op, out, "out", weight, "weight");
  detail::check_out_shape(op, out, "out", ids, ids.dim(), weight.size(1));
  detail::check_apart(op, out, "out", weight, "weight");
  detail::check_apart(op, out, "out", ids, "ids");
  // Host ids are checked here; CUDA ids are not read back (callers validate them where they
  // enter, e.g. the token files and the server's requests).
  if (ids.is_cpu())
    detail::check_index_range(op, ids, weight.size(0), "id", "flat position", weight);
  MICROLLM_KERNEL(weight.device(), embedding_forward, weight, ids, out);
}

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

  // The weight's handle (not detached) is kept only to add into its pending gradient buffer.
  const Tensor add_to = autograd::gradient_adds_enabled() ? weight : Tensor();
  autograd::record("embedding", {weight, ids}, {&out},
                   [idc, V, C, dtype = weight.dtype(), add_to](const std::vector<Tensor>& g) {
                     // Accumulate in F32 (F64 for F64 weights), then store in the weight's dtype.
                     const DType acc = detail::stat_dtype(dtype);
                     const Tensor dy = g[0].is_cuda() ? g[0].contiguous()
                                                      : g[0].to(acc).contiguous();  // (..., C)
#if MICROLLM_WITH_CUDA
                     // Where the weight's gradient so far waits in its buffer (a tied LM head
                     // wrote it there), only the rows the ids name are added into it and no
                     // gradient is returned (autograd/gradient_buffer.h).
                     if (dy.is_cuda())
                       if (const Tensor into = autograd::pending_gradient_buffer(add_to);
                           into.defined()) {  // (V, C)
                         embedding_backward_add_cuda(dy, idc, into);
                         return std::vector<Tensor>{Tensor(), Tensor()};
                       }
#endif
                     Tensor dw = Tensor::zeros({V, C}, acc, dy.device());  // (V, C)
                     // Elsewhere the engine adds this dense gradient into a pending buffer.
                     MICROLLM_KERNEL(dy.device(), embedding_backward, dy, idc, dw);
                     return std::vector<Tensor>{dw.to(dtype), Tensor()};
                   });
  return out;
}

}  // namespace microllm::ops
