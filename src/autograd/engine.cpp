// Recording the reverse-mode graph and running it backward.
//
// Leaves that require a gradient get an AccumulateGrad node, created on first use, which adds
// incoming gradients into the leaf's `.grad`. run_backward counts, for every node reachable
// from the roots, how many edges point at it, then runs nodes whose gradients are complete
// (Kahn's algorithm), summing the gradients that arrive at the same output. Once a leaf's
// AccumulateGrad has run, its .grad is final for the pass and its post-accumulate-grad hooks
// run (data-parallel training starts bucket all-reduces from them). Tensor::backward (declared
// in core/tensor.h) is defined at the end of this file.
#include <algorithm>
#include <atomic>
#include <unordered_map>

#include "microllm/autograd/checkpoint.h"
#include "microllm/autograd/gradient_buffer.h"
#include "microllm/autograd/node.h"
#include "microllm/ops/elementwise.h"

namespace microllm::autograd {
namespace {

thread_local bool t_grad_mode = true;

// Whether two tensors are the same elements of the same storage, laid out alike.
bool same_memory(const Tensor& a, const Tensor& b) {
  return a.storage() == b.storage() && a.offset() == b.offset() && a.shape() == b.shape() &&
         a.strides() == b.strides() && a.dtype() == b.dtype();
}

// sum += grad with add's kernel, in place; the CPU runs bf16/f16 sums only through add
// (widened to F32), so there the sum is copied back.
void add_in_place(Tensor& sum, const Tensor& grad) {
  const bool narrow_on_cpu =
      sum.is_cpu() && (sum.dtype() == DType::BF16 || sum.dtype() == DType::F16);
  if (narrow_on_cpu)
    sum.copy_from(ops::add(sum, grad));
  else
    ops::add_out(sum, grad, sum);
}

class AccumulateGrad final : public Node {
 public:
  explicit AccumulateGrad(std::shared_ptr<TensorImpl> leaf)
      : Node("AccumulateGrad", 1, {}, {}, nullptr), leaf_(std::move(leaf)) {}

  // Called by the engine with the gradient summed for the leaf so far in this pass, or
  // undefined at the start of a pass: marks whether that sum lives in the leaf's buffer.
  void set_pending(const Tensor& sum) {
    AutogradMeta& meta = leaf_->autograd;
    meta.grad_buffer_pending =
        sum.defined() && meta.grad_buffer.defined() && same_memory(sum, meta.grad_buffer);
  }

  // With adds on (gradient_buffer.h), a gradient arriving while the sum so far is pending in
  // the leaf's buffer is added there in place (add's kernel, the engine's bits); returns
  // whether it was.
  bool add_into_pending(const Tensor& sum, const Tensor& grad) {
    const AutogradMeta& meta = leaf_->autograd;
    if (!meta.grad_buffer_pending || !same_memory(sum, meta.grad_buffer) ||
        !gradient_adds_enabled())
      return false;
    Tensor into = sum;  // (shape of the leaf) the buffer
    add_in_place(into, grad);
    return true;
  }

  std::vector<Tensor> apply(const std::vector<Tensor>& grad_outputs) override {
    leaf_->autograd.grad_buffer_pending = false;
    const Tensor& incoming = grad_outputs[0];
    if (!incoming.defined()) return {};
    Tensor& grad = leaf_->autograd.grad;
    Tensor& buffer = leaf_->autograd.grad_buffer;
    NoGradGuard no_grad;
    // The first gradient is copied (into the leaf's buffer when it has one) so later in-place
    // updates of .grad never alias a value another part of the graph still holds; one a
    // backward function wrote into the claimed buffer (autograd/gradient_buffer.h) is there
    // already. A gradient kept in the buffer grows in place; elsewhere (a tensor set by
    // set_grad) by a new sum.
    if (!grad.defined() && buffer.defined()) {
      if (!same_memory(incoming, buffer)) buffer.copy_from(incoming);
      grad = buffer;
    } else if (!grad.defined()) {
      grad = incoming.clone();
    } else if (grad.same(buffer)) {
      add_in_place(grad, incoming);
    } else {
      grad = ops::add(grad, incoming);
    }
    // The engine runs this node once per backward pass, after every gradient for the leaf
    // has been summed, so .grad is final here. Hooks are copied: one may remove itself.
    const auto hooks = leaf_->autograd.post_accumulate_grad_hooks;
    if (!hooks.empty()) {
      const Tensor leaf(leaf_);
      for (const auto& [id, hook] : hooks) hook(leaf);
    }
    return {};
  }

 private:
  std::shared_ptr<TensorImpl> leaf_;
};

std::shared_ptr<Node> grad_accumulator(const Tensor& leaf) {
  AutogradMeta& meta = leaf.impl()->autograd;
  std::shared_ptr<Node> node = meta.accumulator.lock();
  if (!node) {
    node = std::make_shared<AccumulateGrad>(leaf.impl_ptr());
    meta.accumulator = node;
  }
  return node;
}

Edge edge_for(const Tensor& t) {
  if (!t.defined() || !t.requires_grad()) return {};
  if (t.grad_fn()) return {t.grad_fn(), t.output_nr()};
  return {grad_accumulator(t), 0};
}

}  // namespace

std::vector<Tensor> Node::apply(const std::vector<Tensor>& grad_outputs) {
  MICROLLM_CHECK(backward_ != nullptr, "backward", "the graph through '", name_,
                 "' was already used by a backward pass");
  return backward_(grad_outputs);
}

bool grad_mode_enabled() { return t_grad_mode; }

int64_t register_post_accumulate_grad_hook(const Tensor& leaf, PostAccumulateGradHook hook) {
  static std::atomic<int64_t> next_id{1};
  MICROLLM_CHECK(leaf.defined() && leaf.is_leaf() && leaf.requires_grad(), "autograd",
                 "post-accumulate-grad hooks attach to leaves that require a gradient, found ",
                 leaf.defined() ? leaf.describe() : std::string("an undefined tensor"));
  MICROLLM_CHECK(hook != nullptr, "autograd", "empty post-accumulate-grad hook");
  const int64_t id = next_id++;
  leaf.impl()->autograd.post_accumulate_grad_hooks.emplace_back(id, std::move(hook));
  return id;
}

void remove_post_accumulate_grad_hook(const Tensor& leaf, int64_t id) {
  if (!leaf.defined()) return;
  auto& hooks = leaf.impl()->autograd.post_accumulate_grad_hooks;
  std::erase_if(hooks, [id](const auto& entry) { return entry.first == id; });
}

NoGradGuard::NoGradGuard() : previous_(t_grad_mode) { t_grad_mode = false; }
NoGradGuard::~NoGradGuard() { t_grad_mode = previous_; }

GradModeGuard::GradModeGuard(bool enabled) : previous_(t_grad_mode) { t_grad_mode = enabled; }
GradModeGuard::~GradModeGuard() { t_grad_mode = previous_; }

bool any_requires_grad(const std::vector<Tensor>& inputs) {
  if (!t_grad_mode) return false;
  for (const Tensor& t : inputs)
    if (t.defined() && t.requires_grad()) return true;
  return false;
}

void record(const std::string& name, const std::vector<Tensor>& inputs,
            const std::vector<Tensor*>& outputs, Node::BackwardFn backward, Node::ClaimFn claim) {
  if (!any_requires_grad(inputs)) return;
  std::vector<Edge> edges;
  std::vector<Shape> shapes;
  edges.reserve(inputs.size());
  for (const Tensor& input : inputs) {
    edges.push_back(edge_for(input));
    shapes.push_back(input.defined() ? input.shape() : Shape{});
  }
  auto node = std::make_shared<Node>(name, static_cast<int>(outputs.size()), std::move(edges),
                                     std::move(shapes), std::move(backward), std::move(claim));
  for (size_t i = 0; i < outputs.size(); ++i) outputs[i]->set_grad_fn(node, static_cast<int>(i));
}

void run_backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grad_outputs) {
  NoGradGuard no_grad;  // backward functions compute with plain operators
  // Gradients waiting at each node, one slot per node output.
  std::unordered_map<Node*, std::vector<Tensor>> pending;
  auto deliver = [&](const Edge& edge, const Tensor& grad) {
    std::vector<Tensor>& slots = pending[edge.node.get()];
    if (slots.empty()) slots.resize(static_cast<size_t>(edge.node->num_outputs()));
    Tensor& slot = slots[static_cast<size_t>(edge.input_nr)];
    auto* accumulator = dynamic_cast<AccumulateGrad*>(edge.node.get());
    if (!slot.defined())
      slot = grad;
    else if (accumulator == nullptr || !accumulator->add_into_pending(slot, grad))
      slot = ops::add(slot, grad);
    if (accumulator != nullptr) accumulator->set_pending(slot);
  };

  // 1. Count the edges into every reachable node.
  std::unordered_map<Node*, int> dependencies;
  std::vector<Node*> stack;
  std::vector<Edge> root_edges;
  for (const Tensor& root : roots) {
    Edge edge = edge_for(root);
    MICROLLM_CHECK(edge.valid(), "backward", "root ", root.describe(),
                   " does not require a gradient");
    root_edges.push_back(edge);
  }
  for (const Edge& edge : root_edges) {
    if (dependencies.emplace(edge.node.get(), 0).second) stack.push_back(edge.node.get());
  }
  while (!stack.empty()) {
    Node* node = stack.back();
    stack.pop_back();
    // A pass starts with no leaf's gradient pending in its buffer.
    if (auto* accumulator = dynamic_cast<AccumulateGrad*>(node)) accumulator->set_pending(Tensor());
    for (const Edge& next : node->next_edges()) {
      if (!next.valid()) continue;
      auto [it, inserted] = dependencies.emplace(next.node.get(), 0);
      ++it->second;
      if (inserted) stack.push_back(next.node.get());
    }
  }

  // 2. Seed the roots, then run every node once all its gradients have arrived.
  for (size_t i = 0; i < roots.size(); ++i) deliver(root_edges[i], grad_outputs[i]);
  std::vector<std::shared_ptr<Node>> ready;
  for (const Edge& edge : root_edges) {
    const bool queued =
        std::any_of(ready.begin(), ready.end(), [&](const auto& n) { return n == edge.node; });
    if (dependencies[edge.node.get()] == 0 && !queued) ready.push_back(edge.node);
  }
  while (!ready.empty()) {
    std::shared_ptr<Node> node = std::move(ready.back());
    ready.pop_back();
    std::vector<Tensor> grads_in = std::move(pending[node.get()]);
    pending.erase(node.get());
    if (grads_in.empty()) grads_in.resize(static_cast<size_t>(node->num_outputs()));
    // A node none of whose outputs received a gradient contributes nothing: skip it, but
    // still release the nodes that wait for it.
    const bool any_grad =
        std::any_of(grads_in.begin(), grads_in.end(), [](const Tensor& g) { return g.defined(); });
    std::vector<Tensor> grads_out;
    if (any_grad) grads_out = node->apply(grads_in);
    node->release();
    const auto& edges = node->next_edges();
    MICROLLM_CHECK(!any_grad || grads_out.size() == edges.size() || edges.empty(), "backward", "'",
                   node->name(), "' returned ", grads_out.size(), " gradients for ", edges.size(),
                   " inputs");
    for (size_t i = 0; i < edges.size(); ++i) {
      const Edge& edge = edges[i];
      if (!edge.valid()) continue;
      if (any_grad && grads_out[i].defined()) {
        MICROLLM_CHECK(grads_out[i].shape() == node->input_shapes()[i], "backward", "'",
                       node->name(), "' returned a gradient of shape ",
                       shape_str(grads_out[i].shape()), " for input ", i, " of shape ",
                       shape_str(node->input_shapes()[i]));
        deliver(edge, grads_out[i]);
      }
      if (--dependencies[edge.node.get()] == 0) ready.push_back(edge.node);
    }
  }
}

}  // namespace microllm::autograd

namespace microllm {

// Tensor::backward is declared in core/tensor.h and defined here, so core needs no autograd.
void Tensor::backward(const Tensor& grad_output) const {
  check_defined("Tensor::backward");
  MICROLLM_CHECK(requires_grad(), "backward", "tensor ", describe(),
                 " does not require a gradient and has no grad_fn");
  Tensor seed = grad_output;
  if (!seed.defined()) {
    MICROLLM_CHECK(numel() == 1, "backward", "a gradient must be given for non-scalar output ",
                   describe());
    seed = Tensor::full(shape(), 1.0, dtype(), device());
  }
  MICROLLM_CHECK(seed.shape() == shape() && seed.dtype() == dtype() && seed.device() == device(),
                 "backward", "gradient ", seed.describe(), " does not match output ", describe(),
                 " in shape, dtype or device");
  autograd::run_backward({*this}, {seed});
}

}  // namespace microllm
