// Kernel entry points of the multi-tensor optimizer ops (see microllm/ops/adamw.h); the
// tensors are validated by adamw.cpp (dense, one device, matching shapes and dtypes).
#pragma once

#include <vector>

#include "microllm/ops/adamw.h"

namespace microllm::ops {

void adamw_step_cpu(const std::vector<AdamWTensors>& tensors, const AdamWScalars& scalars);
// out: () F32.
void sum_of_squares_cpu(const std::vector<Tensor>& tensors, const Tensor& out);

#if MICROLLM_WITH_CUDA
void adamw_step_cuda(const std::vector<AdamWTensors>& tensors, const AdamWScalars& scalars);
void sum_of_squares_cuda(const std::vector<Tensor>& tensors, const Tensor& out);
#endif

}  // namespace microllm::ops
