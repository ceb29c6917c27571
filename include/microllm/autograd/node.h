// A node of the reverse-mode graph: one operator application that produced tensors.
//
// Each operator creates its node right beside its forward code, saving what its backward
// needs inside the `backward` function. Edges point at the nodes that produced the
// operator's inputs (or at AccumulateGrad nodes for leaves), so the engine can walk back.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "microllm/core/tensor.h"

namespace microllm::autograd {

class Node;

// Where the gradient of one input goes: `input_nr`-th output of `node`. Empty when the input
// needs no gradient.
struct Edge {
  std::shared_ptr<Node> node;
  int input_nr = 0;
  bool valid() const { return node != nullptr; }
};

class Node {
 public:
  // grads of each output (undefined where no gradient reached) → grads of each input.
  using BackwardFn = std::function<std::vector<Tensor>(const std::vector<Tensor>& grad_outputs)>;
  // Where the gradient of output `output_nr` may be written, or undefined (see
  // autograd/gradient_buffer.h).
  using ClaimFn = std::function<Tensor(int output_nr)>;

  // `input_shapes[i]` is the shape the gradient for edge i must have (checked by the engine).
  Node(std::string name, int num_outputs, std::vector<Edge> next_edges,
       std::vector<Shape> input_shapes, BackwardFn backward, ClaimFn claim = nullptr)
      : name_(std::move(name)),
        num_outputs_(num_outputs),
        next_edges_(std::move(next_edges)),
        input_shapes_(std::move(input_shapes)),
        backward_(std::move(backward)),
        claim_(std::move(claim)) {}
  virtual ~Node() = default;

  const std::string& name() const { return name_; }
  int num_outputs() const { return num_outputs_; }
  const std::vector<Edge>& next_edges() const { return next_edges_; }
  const std::vector<Shape>& input_shapes() const { return input_shapes_; }
  virtual std::vector<Tensor> apply(const std::vector<Tensor>& grad_outputs);
  // Memory the gradient of output `output_nr` may be written into, claimed for this pass by
  // the ClaimFn given at recording, or undefined (no ClaimFn, or nothing to claim). Leaves'
  // buffers are claimed by autograd::claim_gradient_buffer itself.
  virtual Tensor claim_gradient(int output_nr) { return claim_ ? claim_(output_nr) : Tensor(); }
  // Drops saved tensors once backward has run (the graph is single-use).
  void release() {
    backward_ = nullptr;
    claim_ = nullptr;
  }

 private:
  std::string name_;
  int num_outputs_;
  std::vector<Edge> next_edges_;
  std::vector<Shape> input_shapes_;
  BackwardFn backward_;
  ClaimFn claim_;
};

// True when gradients are being recorded (see NoGradGuard).
bool grad_mode_enabled();

// Disables recording of the autograd graph in its scope (like torch.no_grad()).
class NoGradGuard {
 public:
  NoGradGuard();
  ~NoGradGuard();
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool previous_;
};

// True when grad mode is on and any of `inputs` requires a gradient.
bool any_requires_grad(const std::vector<Tensor>& inputs);

// Connects `outputs` to a new node running `backward` for the operator `name`, when any of
// `inputs` requires a gradient and grad mode is on; otherwise does nothing. Undefined
// entries in `inputs` (optional arguments) get no edge and must receive an undefined grad.
// `claim` (optional): where an output's gradient may be written (Node::claim_gradient).
void record(const std::string& name, const std::vector<Tensor>& inputs,
            const std::vector<Tensor*>& outputs, Node::BackwardFn backward,
            Node::ClaimFn claim = nullptr);

// Runs reverse mode from `roots` with the given output gradients, accumulating into the
// `.grad` of every leaf that requires a gradient.
void run_backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grad_outputs);

// Called with the leaf once a backward pass has added its last gradient into leaf.grad —
// the leaf's .grad is final for that pass (PyTorch's register_post_accumulate_grad_hook).
// Runs inside the backward pass, with grad mode off. Data-parallel training uses it to start
// a gradient bucket's all-reduce while the rest of backward still runs.
using PostAccumulateGradHook = std::function<void(const Tensor& leaf)>;

// Adds `hook` to a leaf that requires a gradient; returns an id for removal. Hooks run in
// the order they were added.
int64_t register_post_accumulate_grad_hook(const Tensor& leaf, PostAccumulateGradHook hook);
// Removes the hook with `id` from `leaf` (no-op when it is not there).
void remove_post_accumulate_grad_hook(const Tensor& leaf, int64_t id);

}  // namespace microllm::autograd
