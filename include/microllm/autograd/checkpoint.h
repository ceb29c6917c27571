// Activation recomputation (gradient checkpointing; Chen et al. 2016, torch.utils.checkpoint):
// a segment of the forward runs without recording, and its backward runs the segment again,
// recorded, from the saved inputs, then backward through that copy. The activations inside
// the segment are freed as soon as the forward leaves it, at the cost of a second forward.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "microllm/core/tensor.h"

namespace microllm::autograd {

// Enables (or disables) gradient recording in its scope, whatever the surrounding mode.
class GradModeGuard {
 public:
  explicit GradModeGuard(bool enabled);
  ~GradModeGuard();
  GradModeGuard(const GradModeGuard&) = delete;
  GradModeGuard& operator=(const GradModeGuard&) = delete;

 private:
  bool previous_;
};

// The segment: outputs from inputs. It must be deterministic (it runs twice and the second
// run's values are the ones differentiated) and may read leaves that require a gradient
// (parameters), which receive their gradients during the recomputation; every non-leaf
// tensor that requires a gradient must come in through `inputs`.
using Segment = std::function<std::vector<Tensor>(const std::vector<Tensor>& inputs)>;

// Runs `segment` on `inputs`. With grad mode on and an input that requires a gradient, the
// outputs get one node `name` that saves only the inputs; otherwise this is segment(inputs).
// The gradients equal those of the recorded segment when its backward sums them in the
// same order (tested for the transformer layer: bit for bit).
std::vector<Tensor> checkpoint(const std::string& name, const Segment& segment,
                               const std::vector<Tensor>& inputs);

}  // namespace microllm::autograd
