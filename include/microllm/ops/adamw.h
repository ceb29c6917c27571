// Multi-tensor optimizer kernels: one AdamW update and one sum of squared gradients over a
// whole list of parameters in a few launches (on CUDA, one per batch of tensors), instead of
// about fifteen elementwise operators per parameter.
//
// The update repeats the reference optimizer's arithmetic (train::AdamW written with the
// elementwise operators) operation for operation, each rounded to F32 with no fused
// multiply-add, so it gives the same bits:
//   g ← F32(grad)                       (× grad_scale rounded back to grad's dtype, when
//                                         clipping scaled the gradients)
//   m ← m·β1 + g·(1−β1);  v ← v·β2 + (g·g)·(1−β2)
//   w ← master·(1 − lr·wd) for decayed tensors, else master
//   master ← w − (m·(lr/bias1)) / (sqrt(v·(1/bias2)) + ε);  param ← master in param's dtype
// Scalars are rounded to F32 once on the host, as the elementwise operators round theirs.
#pragma once

#include <vector>

#include "microllm/core/tensor.h"

namespace microllm::ops {

// One parameter's tensors: param (any shape, F32/BF16/F16), grad (param's shape and dtype),
// master, exp_avg, exp_avg_sq (param's shape, F32). All dense on one device. master may be
// param itself (F32 parameters).
struct AdamWTensors {
  Tensor param;
  Tensor grad;
  Tensor master;
  Tensor exp_avg;
  Tensor exp_avg_sq;
  bool decay = false;  // weight decay applies
};

struct AdamWScalars {
  double lr = 0;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0;
  double bias1 = 1;  // 1 − β1^step
  double bias2 = 1;  // 1 − β2^step
  // Gradients are multiplied by this (and rounded to their dtype) first, as clipping the
  // gradients in place would; 1 leaves them as they are.
  double grad_scale = 1;
};

// Updates every entry in place.
void adamw_step(const std::vector<AdamWTensors>& tensors, const AdamWScalars& scalars);

// Σ over every element of every tensor of F32(x)², in F32 partial sums combined in a fixed
// order (the same bits on every call; CPU and CUDA orders differ): a () F32 tensor on the
// tensors' device. An empty list gives 0 on the CPU.
Tensor sum_of_squares(const std::vector<Tensor>& tensors);

}  // namespace microllm::ops
