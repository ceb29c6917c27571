// Cross-entropy of logits against integer targets, averaged over the targets that are not
// `ignore_index` (as torch.nn.functional.cross_entropy with reduction="mean"). When every
// target is ignored the loss is 0 (PyTorch gives NaN) and the gradient is zero.
#pragma once

#include "microllm/core/tensor.h"

namespace microllm::ops {

// logits (N, V) floating; targets (N) I32/I64 in [0, V) or ignore_index → shape () in the
// logits' dtype (as PyTorch)
Tensor cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index = -100);
// The same with the loss returned in `loss_dtype`. The loss is computed in F32 (F64 for F64
// logits) either way; asking for F32 with BF16 logits keeps that precision instead of
// rounding it to BF16 (what Hugging Face's causal-LM loss gives by upcasting the logits).
Tensor cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index,
                     DType loss_dtype);

}  // namespace microllm::ops
