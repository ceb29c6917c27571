// Cross-entropy of logits against integer targets, averaged over the targets that are not
// `ignore_index` (as torch.nn.functional.cross_entropy with reduction="mean"). When every
// target is ignored the loss is 0 (PyTorch gives NaN) and the gradient is zero.
#pragma once

#include "microllm/core/tensor.h"

namespace microllm::ops {

// logits (N, V) floating; targets (N) I32/I64 in [0, V) or ignore_index → shape ()
Tensor cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index = -100);

}  // namespace microllm::ops
