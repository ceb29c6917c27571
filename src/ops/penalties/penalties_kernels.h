// Kernel entry points of apply_penalties (include/microllm/ops/penalties.h). The caller
// (penalties.cpp) has checked shapes, dtypes, devices and density.
//
// Layouts (dense, row-major): logits (B, V) F32, updated in place; history (B, L) I32;
// prompt_lens (B) I32; penalty tensors (B) F32; workspace (B, bit_ceil(L)) U32 — row b's
// history as sort keys id·2 + [generated], invalid entries as 0xffffffff (sorted last).
#pragma once

#include "microllm/core/tensor.h"
#include "microllm/ops/penalties.h"

namespace microllm::ops {

void apply_penalties_cpu(const Tensor& logits, const Tensor& history, const Tensor& prompt_lens,
                         const PenaltyTensors& penalties, const Tensor& workspace);
#if MICROLLM_WITH_CUDA
void apply_penalties_cuda(const Tensor& logits, const Tensor& history, const Tensor& prompt_lens,
                          const PenaltyTensors& penalties, const Tensor& workspace);
#endif

}  // namespace microllm::ops
