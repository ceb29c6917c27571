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

namespace microllm::ops {

// The LM head and its loss without the whole logits matrix (DESIGN §8): the mean cross-entropy
// of logits = hidden · weightᵀ against `targets`, computed `chunk_rows` rows at a time, so that
// at most (chunk_rows, V) logits (and, in backward, their gradient) exist at once. Backward
// recomputes each chunk's logits from hidden and weight. Equals
// cross_entropy(linear(hidden, weight), targets, ignore_index, loss_dtype) within the dtype's
// contract: the loss is summed chunk by chunk and weight's gradient accumulates the chunks in
// F32 (F64 for F64), rounded to weight's dtype once.
// hidden (N, C) floating; weight (V, C) same dtype and device; targets (N) I32/I64 in [0, V) or
// ignore_index; chunk_rows ≥ 1 → shape () in loss_dtype.
Tensor linear_cross_entropy(const Tensor& hidden, const Tensor& weight, const Tensor& targets,
                            int64_t ignore_index, DType loss_dtype, int64_t chunk_rows);

// The LM head and its loss in one node whose forward also writes the logits' gradient: the mean
// cross-entropy of logits = hidden · weightᵀ against `targets`, where the forward computes
// (softmax − onehot)/kept over the logits in place (CUDA: the logits read once), keeps that
// instead of the logits, and the backward only multiplies it into the two products, scaled by
// dloss. No recompute, and the (N, V) logits and their gradient never exist side by side.
// Equals cross_entropy(linear(hidden, weight), targets, ignore_index, loss_dtype) within the
// dtype's contract (for dloss = 1, the same formula for each gradient element); the weight's
// gradient goes into its claimed gradient buffer as linear's does.
// hidden (N, C) floating; weight (V, C) same dtype and device; targets (N) I32/I64 in [0, V) or
// ignore_index → shape () in loss_dtype.
Tensor lm_head_cross_entropy(const Tensor& hidden, const Tensor& weight, const Tensor& targets,
                             int64_t ignore_index, DType loss_dtype);

}  // namespace microllm::ops
