// Kernel entry points of the sampling operators (include/microllm/ops/sampling.h). The
// callers (sampling.cpp) have checked shapes, dtypes, devices and density; kernels trust
// them and the parameter values (validated on the host by validate_sampling_params).
//
// Layouts (dense, row-major): logits (B, V) F32 or BF16 as stored (the CPU reads BF16
// directly, no widened copy); parameter tensors (B); out_ids (B) I32; out_scores and
// out_probs (B, V) F32; top_ids (B, N) I32; top_logprobs (B, N) F32.
#pragma once

#include "microllm/core/tensor.h"
#include "microllm/ops/sampling.h"

namespace microllm::ops {

// CUDA `sample` splits a greedy row over at most this many blocks; its workspace holds, per
// row, that many best pairs (F32 value, I32 id) and one U32 arrival counter, which must be zero
// before the first call (every call leaves it zero).
inline constexpr int kGreedySplitMax = 32;
inline constexpr size_t kGreedySplitBytesPerRow =
    kGreedySplitMax * (sizeof(float) + sizeof(int32_t)) + sizeof(uint32_t);

// One call serves sample and sampling_distribution: out_ids (when defined) gets the draws;
// out_scores and out_probs (when defined) the filtered distribution.
void sample_rows_cpu(const Tensor& logits, const SamplingTensors& params, const Tensor& out_ids,
                     const Tensor& out_scores, const Tensor& out_probs, const Tensor& workspace);
void logprobs_rows_cpu(const Tensor& logits, const Tensor& ids, const Tensor& out_logprobs,
                       const Tensor& top_ids, const Tensor& top_logprobs);
void counter_random_cpu(const Tensor& seeds, const Tensor& positions, const Tensor& out);

#if MICROLLM_WITH_CUDA
void sample_rows_cuda(const Tensor& logits, const SamplingTensors& params, const Tensor& out_ids,
                      const Tensor& out_scores, const Tensor& out_probs, const Tensor& workspace);
void logprobs_rows_cuda(const Tensor& logits, const Tensor& ids, const Tensor& out_logprobs,
                        const Tensor& top_ids, const Tensor& top_logprobs);
void counter_random_cuda(const Tensor& seeds, const Tensor& positions, const Tensor& out);
#endif

}  // namespace microllm::ops
