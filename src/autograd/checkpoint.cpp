// Activation recomputation (see checkpoint.h).
#include "microllm/autograd/checkpoint.h"

#include "microllm/autograd/node.h"

namespace microllm::autograd {

std::vector<Tensor> checkpoint(const std::string& name, const Segment& segment,
                               const std::vector<Tensor>& inputs) {
  if (!any_requires_grad(inputs)) return segment(inputs);
  std::vector<Tensor> outputs;
  {
    NoGradGuard no_grad;  // nothing inside the segment is saved
    outputs = segment(inputs);
  }
  std::vector<Tensor*> targets;
  for (Tensor& out : outputs) targets.push_back(&out);
  record(name, inputs, targets, [segment, inputs](const std::vector<Tensor>& grad_outputs) {
    GradModeGuard recording(true);
    // The inputs as fresh leaves: the recomputed segment's graph ends at them.
    std::vector<Tensor> leaves;
    for (const Tensor& in : inputs) {
      Tensor leaf = in.defined() ? in.detach() : Tensor();
      if (in.defined() && in.requires_grad()) leaf.set_requires_grad(true);
      leaves.push_back(leaf);
    }
    const std::vector<Tensor> again = segment(leaves);
    std::vector<Tensor> roots, seeds;
    for (size_t i = 0; i < again.size() && i < grad_outputs.size(); ++i)
      if (grad_outputs[i].defined() && again[i].requires_grad()) {
        roots.push_back(again[i]);
        seeds.push_back(grad_outputs[i]);
      }
    if (!roots.empty()) run_backward(roots, seeds);
    std::vector<Tensor> grads;
    for (const Tensor& leaf : leaves)
      grads.push_back(leaf.defined() && leaf.requires_grad() ? leaf.grad() : Tensor());
    return grads;
  });
  return outputs;
}

}  // namespace microllm::autograd
