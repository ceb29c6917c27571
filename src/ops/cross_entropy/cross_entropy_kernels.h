// Kernel entry points of cross-entropy.
#pragma once

#include "microllm/core/tensor.h"

namespace microllm::ops {

// logits (N, V) dense (CPU: F32/F64; CUDA: F32/BF16/F16); targets (N) I32/I64 dense, already
// checked; lse (N) and loss () in F32 (F64 for F64 logits). loss = Σ_kept (lse − logit[t]) /
// kept, summed in a fixed order (deterministic); 0 when kept = 0.
void cross_entropy_forward_cpu(const Tensor& logits, const Tensor& targets, int64_t ignore_index,
                               int64_t kept, const Tensor& lse, const Tensor& loss);
// dlogits (N, V), logits' dtype = dloss·(softmax − onehot)/kept on kept rows, 0 elsewhere.
// dloss: a one-element tensor on the same device, in lse's dtype (read on the device).
void cross_entropy_backward_cpu(const Tensor& logits, const Tensor& targets, const Tensor& lse,
                                const Tensor& dloss, int64_t ignore_index, int64_t kept,
                                const Tensor& dlogits);
// Forward and the gradient for dloss = 1 at once: lse and loss as cross_entropy_forward, and
// dlogits = (softmax − onehot)/kept on kept rows, 0 elsewhere, as cross_entropy_backward with
// dloss = 1 (the same formula and dtype). dlogits may be logits itself (written in place).
void cross_entropy_forward_grad_cpu(const Tensor& logits, const Tensor& targets,
                                    int64_t ignore_index, int64_t kept, const Tensor& lse,
                                    const Tensor& loss, const Tensor& dlogits);
#if MICROLLM_WITH_CUDA
void cross_entropy_forward_cuda(const Tensor& logits, const Tensor& targets, int64_t ignore_index,
                                int64_t kept, const Tensor& lse, const Tensor& loss);
void cross_entropy_backward_cuda(const Tensor& logits, const Tensor& targets, const Tensor& lse,
                                 const Tensor& dloss, int64_t ignore_index, int64_t kept,
                                 const Tensor& dlogits);
void cross_entropy_forward_grad_cuda(const Tensor& logits, const Tensor& targets,
                                     int64_t ignore_index, int64_t kept, const Tensor& lse,
                                     const Tensor& loss, const Tensor& dlogits);
#endif

}  // namespace microllm::ops
