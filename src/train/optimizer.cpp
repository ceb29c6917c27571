// AdamW and SGD with momentum over F32 master weights (see optimizer.h). The reference
// updates are written with the elementwise operators, so they run on the parameters'
// device; AdamW's fused path (AdamWOptions::fused) runs ops::adamw_step, a multi-tensor
// kernel with the same arithmetic and bits.
#include "microllm/train/optimizer.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <numbers>

#include "microllm/autograd/node.h"
#include "microllm/ops/adamw.h"
#include "microllm/ops/elementwise.h"
#include "microllm/ops/reduce.h"

namespace microllm::train {

std::vector<OptimizerParam> optimizer_params(const std::map<std::string, Tensor>& params) {
  std::vector<OptimizerParam> out;
  for (const auto& [name, p] : params) out.emplace_back(name, p, p.dim() >= 2);
  return out;
}

Optimizer::Optimizer(const std::map<std::string, Tensor>& params)
    : Optimizer(optimizer_params(params)) {}

namespace {
// (shape) a dense view of `buffer` (a flat (P) tensor) from element `offset`.
Tensor flat_view(const Tensor& buffer, int64_t offset, const Shape& shape) {
  return Tensor::from_storage(buffer.storage(), shape, contiguous_strides(shape),
                              buffer.offset() + offset, buffer.dtype());
}

// Where `param` starts in `flat`, checking that it is a dense view inside it.
int64_t offset_in(const Tensor& flat, const Tensor& param, const std::string& name) {
  const int64_t offset = param.offset() - flat.offset();
  MICROLLM_CHECK(param.storage() == flat.storage() && param.dtype() == flat.dtype() &&
                     param.is_contiguous() && offset >= 0 && offset + param.numel() <= flat.numel(),
                 "optimizer", "parameter ", name, " (", param.describe(),
                 ") is not a dense view of the flat parameter buffer ", flat.describe());
  return offset;
}
}  // namespace

Optimizer::Optimizer(const std::vector<OptimizerParam>& params, const Tensor& flat) {
  Tensor flat_master;  // (P) F32: the flat buffer itself when it is F32
  if (flat.defined()) {
    MICROLLM_CHECK(
        flat.dim() == 1 && flat.is_contiguous() && is_floating(flat.dtype()), "optimizer",
        "the flat parameter buffer must be a dense floating (P) tensor, found ", flat.describe());
    const int64_t P = flat.numel();
    flat_master =
        flat.dtype() == DType::F32 ? flat.detach() : Tensor::zeros({P}, DType::F32, flat.device());
    flat_grad_ = Tensor::zeros({P}, flat.dtype(), flat.device());
  }
  for (const OptimizerParam& op : params) {
    Tensor p = op.param;  // (any shape) the parameter or a flat (N) slice of one
    MICROLLM_CHECK(is_floating(p.dtype()), "optimizer", "parameter ", op.name,
                   " is not floating: ", p.describe());
    if (!flat.defined()) {
      // (shape of p) F32
      Tensor master = p.dtype() == DType::F32 ? p.detach() : p.detach().to(DType::F32).clone();
      slots_.push_back({op.name, p, master, op.decay});
      continue;
    }
    const int64_t offset = offset_in(flat, p, op.name);
    Tensor master =
        p.dtype() == DType::F32 ? p.detach() : flat_view(flat_master, offset, p.shape());
    if (!master.same(p)) master.copy_from(p);
    p.set_grad_buffer(flat_view(flat_grad_, offset, p.shape()));
    slots_.push_back({op.name, p, master, op.decay, offset});
  }
}

std::vector<Tensor> Optimizer::make_state() const {
  std::vector<Tensor> out;
  Tensor buffer;  // (P) F32, flat optimizers
  if (flat()) buffer = Tensor::zeros({flat_grad_.numel()}, DType::F32, flat_grad_.device());
  for (const Slot& s : slots_)
    out.push_back(flat() ? flat_view(buffer, s.offset, s.master.shape())
                         : Tensor::zeros(s.master.shape(), DType::F32, s.master.device()));
  return out;
}

double Optimizer::gradient_norm() {
  autograd::NoGradGuard no_grad;
  if (flat()) {
    // Outside the views the flat buffer holds zeros; a view whose parameter got no gradient
    // this pass could hold an older one.
    for (const Slot& s : slots_) {
      const Tensor g = s.param.grad();      // (shape of the parameter), its dtype
      Tensor view = s.param.grad_buffer();  // (shape of the parameter), its dtype
      if (!g.defined())
        view.fill(0.0);
      else if (!g.same(view))
        view.copy_from(g);
    }
    return std::sqrt(ops::sum_of_squares({flat_grad_}).item());
  }
  std::vector<Tensor> grads;
  for (const Slot& s : slots_)
    if (const Tensor g = s.param.grad(); g.defined()) grads.push_back(g.contiguous());
  if (grads.empty()) return 0.0;
  return std::sqrt(ops::sum_of_squares(grads).item());
}

void Optimizer::zero_grad() {
  for (Slot& s : slots_) s.param.zero_grad();
}

double Optimizer::take_grad_scale() {
  const double scale = grad_scale_;
  grad_scale_ = 1.0;
  return scale;
}

void Optimizer::scale_gradients(double scale) {
  if (scale == 1.0) return;
  for (Slot& s : slots_) {
    if (!s.param.grad().defined()) continue;
    Tensor g = s.param.grad();  // (shape of the parameter), its dtype
    g.copy_from(ops::scale(g, scale));
  }
}

void Optimizer::publish(Slot& slot) {
  if (!slot.master.same(slot.param)) slot.param.detach().copy_from(slot.master);
}

NamedTensors Optimizer::state() const {
  NamedTensors out;
  for (const Slot& s : slots_) out.emplace_back("master." + s.name, s.master);
  return out;
}

void Optimizer::load_state(const std::map<std::string, Tensor>& tensors, int64_t steps) {
  for (Slot& s : slots_) {
    auto it = tensors.find("master." + s.name);
    MICROLLM_CHECK(it != tensors.end(), "optimizer", "checkpoint has no master weights for ",
                   s.name);
    MICROLLM_CHECK(it->second.shape() == s.master.shape(), "optimizer", "master weights of ",
                   s.name, " are ", it->second.describe(), ", expected ", s.master.describe());
    s.master.copy_from(it->second);
    publish(s);
  }
  steps_ = steps;
}

namespace {
// Copies tensors named PREFIX.NAME from `tensors` into `targets` (one per slot name).
template <class Slots>
void load_named(const std::map<std::string, Tensor>& tensors, const std::string& prefix,
                const Slots& slots, std::vector<Tensor>& targets) {
  for (size_t i = 0; i < slots.size(); ++i) {
    auto it = tensors.find(prefix + slots[i].name);
    MICROLLM_CHECK(it != tensors.end(), "optimizer", "checkpoint has no ", prefix, slots[i].name);
    MICROLLM_CHECK(it->second.shape() == targets[i].shape(), "optimizer", prefix, slots[i].name,
                   " is ", it->second.describe(), ", expected ", targets[i].describe());
    targets[i].copy_from(it->second);
  }
}
}  // namespace

AdamW::AdamW(const std::map<std::string, Tensor>& params, AdamWOptions options)
    : Optimizer(params), options_(options) {
  init_state();
}

AdamW::AdamW(const std::vector<OptimizerParam>& params, AdamWOptions options, const Tensor& flat)
    : Optimizer(params, flat), options_(options) {
  init_state();
}

void AdamW::init_state() {
  exp_avg_ = make_state();
  exp_avg_sq_ = make_state();
}

void AdamW::step(double lr) {
  autograd::NoGradGuard no_grad;
  ++steps_;
  const double b1 = options_.beta1, b2 = options_.beta2;
  const double bias1 = 1.0 - std::pow(b1, static_cast<double>(steps_));
  const double bias2 = 1.0 - std::pow(b2, static_cast<double>(steps_));
  const double grad_scale = take_grad_scale();
  if (options_.fused) {
    if (!fused_tensors_current()) {
      std::vector<ops::AdamWTensors> tensors;
      bool in_flat_views = flat();  // every gradient is its parameter's flat gradient view
      for (size_t i = 0; i < slots_.size(); ++i) {
        const Slot& s = slots_[i];
        const Tensor grad = s.param.grad();  // (shape of the parameter), its dtype
        in_flat_views = in_flat_views && grad.defined() && grad.same(s.param.grad_buffer());
        if (!grad.defined()) continue;
        tensors.push_back(
            {s.param.detach(), grad.contiguous(), s.master, exp_avg_[i], exp_avg_sq_[i], s.decay});
      }
      fused_tensors_ = coalesce_adamw(std::move(tensors));
      fused_grads_.clear();
      if (in_flat_views)
        for (const Slot& s : slots_) fused_grads_.push_back(s.param.grad());
    }
    ops::adamw_step(fused_tensors_,
                    {lr, b1, b2, options_.eps, options_.weight_decay, bias1, bias2, grad_scale});
    // Tensors that hold gradients outside the flat buffer are not kept past the step.
    if (fused_grads_.empty()) fused_tensors_.clear();
    return;
  }
  scale_gradients(grad_scale);
  for (size_t i = 0; i < slots_.size(); ++i) {
    Slot& s = slots_[i];
    const Tensor grad = s.param.grad();  // (shape of the parameter), its dtype
    if (!grad.defined()) continue;
    const Tensor g = grad.to(DType::F32);  // (shape of the parameter) F32
    // m ← β1·m + (1−β1)·g;  v ← β2·v + (1−β2)·g²
    exp_avg_[i].copy_from(ops::add(ops::scale(exp_avg_[i], b1), ops::scale(g, 1.0 - b1)));
    exp_avg_sq_[i].copy_from(
        ops::add(ops::scale(exp_avg_sq_[i], b2), ops::scale(ops::mul(g, g), 1.0 - b2)));
    // Decoupled decay, then θ ← θ − lr·m̂ / (sqrt(v̂) + ε).
    // (shape of the parameter) F32
    Tensor w = s.decay && options_.weight_decay != 0.0
                   ? ops::scale(s.master, 1.0 - lr * options_.weight_decay)
                   : s.master;
    // (shape of the parameter) F32
    const Tensor denom =
        ops::add_scalar(ops::sqrt(ops::scale(exp_avg_sq_[i], 1.0 / bias2)), options_.eps);
    // (shape of the parameter) F32
    const Tensor update = ops::div(ops::scale(exp_avg_[i], lr / bias1), denom);
    s.master.copy_from(ops::sub(w, update));
    publish(s);
  }
}

bool AdamW::fused_tensors_current() const {
  if (fused_tensors_.empty() || fused_grads_.size() != slots_.size()) return false;
  for (size_t i = 0; i < slots_.size(); ++i)
    if (!slots_[i].param.grad().same(fused_grads_[i])) return false;
  return true;
}

NamedTensors AdamW::state() const {
  NamedTensors out = Optimizer::state();
  for (size_t i = 0; i < slots_.size(); ++i) {
    out.emplace_back("exp_avg." + slots_[i].name, exp_avg_[i]);
    out.emplace_back("exp_avg_sq." + slots_[i].name, exp_avg_sq_[i]);
  }
  return out;
}

void AdamW::load_state(const std::map<std::string, Tensor>& tensors, int64_t steps) {
  Optimizer::load_state(tensors, steps);
  load_named(tensors, "exp_avg.", slots_, exp_avg_);
  load_named(tensors, "exp_avg_sq.", slots_, exp_avg_sq_);
}

Sgd::Sgd(const std::map<std::string, Tensor>& params, SgdOptions options)
    : Optimizer(params), options_(options) {
  init_state();
}

Sgd::Sgd(const std::vector<OptimizerParam>& params, SgdOptions options, const Tensor& flat)
    : Optimizer(params, flat), options_(options) {
  init_state();
}

void Sgd::init_state() { velocity_ = make_state(); }

void Sgd::step(double lr) {
  autograd::NoGradGuard no_grad;
  ++steps_;
  scale_gradients(take_grad_scale());
  for (size_t i = 0; i < slots_.size(); ++i) {
    Slot& s = slots_[i];
    const Tensor grad = s.param.grad();  // (shape of the parameter), its dtype
    if (!grad.defined()) continue;
    Tensor g = grad.to(DType::F32);  // (shape of the parameter) F32
    // As torch.optim.SGD: g ← g + wd·θ;  b ← μ·b + g (b = g on the first step);  θ ← θ − lr·b
    if (s.decay && options_.weight_decay != 0.0)
      g = ops::add(g, ops::scale(s.master, options_.weight_decay));
    velocity_[i].copy_from(steps_ == 1 ? g
                                       : ops::add(ops::scale(velocity_[i], options_.momentum), g));
    s.master.copy_from(ops::sub(s.master, ops::scale(velocity_[i], lr)));
    publish(s);
  }
}

NamedTensors Sgd::state() const {
  NamedTensors out = Optimizer::state();
  for (size_t i = 0; i < slots_.size(); ++i)
    out.emplace_back("momentum." + slots_[i].name, velocity_[i]);
  return out;
}

void Sgd::load_state(const std::map<std::string, Tensor>& tensors, int64_t steps) {
  Optimizer::load_state(tensors, steps);
  load_named(tensors, "momentum.", slots_, velocity_);
}

std::unique_ptr<Optimizer> make_optimizer(const std::string& kind,
                                          const std::vector<OptimizerParam>& params,
                                          const AdamWOptions& adamw, const SgdOptions& sgd,
                                          const Tensor& flat) {
  if (kind == "adamw") return std::make_unique<AdamW>(params, adamw, flat);
  if (kind == "sgd") return std::make_unique<Sgd>(params, sgd, flat);
  MICROLLM_FAIL("train", "unknown optimizer '", kind, "' (expected adamw or sgd)");
}

double clip_grad_norm(const std::map<std::string, Tensor>& params, double max_norm) {
  autograd::NoGradGuard no_grad;
  Tensor total;  // () F32: the sum of squared gradient elements
  for (const auto& [name, p] : params) {
    if (!p.grad().defined()) continue;
    const Tensor g = p.grad().to(DType::F32);        // (shape of p) F32
    const Tensor sq = ops::sum_all(ops::mul(g, g));  // ()
    total = total.defined() ? ops::add(total, sq) : sq;
  }
  if (!total.defined()) return 0.0;
  const double norm = std::sqrt(total.item());
  const double scale = clip_scale(norm, max_norm);
  if (scale != 1.0) {
    for (const auto& [name, p] : params) {
      if (!p.grad().defined()) continue;
      Tensor g = p.grad();  // (shape of p), p's dtype
      g.copy_from(ops::scale(g, scale));
    }
  }
  return norm;
}

double gradient_norm(const std::map<std::string, Tensor>& params) {
  autograd::NoGradGuard no_grad;
  std::vector<Tensor> grads;
  for (const auto& [name, p] : params)
    if (p.grad().defined()) grads.push_back(p.grad().contiguous());
  if (grads.empty()) return 0.0;
  return std::sqrt(ops::sum_of_squares(grads).item());
}

namespace {
// True when `next` is a dense tensor that starts where the dense `prev` ends in its storage.
bool continues(const Tensor& prev, const Tensor& next) {
  return prev.storage() == next.storage() && prev.dtype() == next.dtype() && prev.is_contiguous() &&
         next.is_contiguous() && prev.offset() + prev.numel() == next.offset();
}

// (n + m) the flat view over a dense `first` and the `count` elements after it.
Tensor extend(const Tensor& first, int64_t count) {
  return Tensor::from_storage(first.storage(), {first.numel() + count}, {1}, first.offset(),
                              first.dtype());
}
}  // namespace

std::vector<ops::AdamWTensors> coalesce_adamw(std::vector<ops::AdamWTensors> tensors) {
  std::stable_sort(tensors.begin(), tensors.end(),
                   [](const ops::AdamWTensors& a, const ops::AdamWTensors& b) {
                     const auto* sa = a.param.storage().get();
                     const auto* sb = b.param.storage().get();
                     return sa != sb ? std::less<>()(sa, sb) : a.param.offset() < b.param.offset();
                   });
  std::vector<ops::AdamWTensors> out;
  for (ops::AdamWTensors& t : tensors) {
    if (!out.empty()) {
      ops::AdamWTensors& last = out.back();
      if (last.decay == t.decay && continues(last.param, t.param) && continues(last.grad, t.grad) &&
          continues(last.master, t.master) && continues(last.exp_avg, t.exp_avg) &&
          continues(last.exp_avg_sq, t.exp_avg_sq)) {
        const int64_t n = t.param.numel();
        last.param = extend(last.param, n);
        last.grad = extend(last.grad, n);
        last.master = extend(last.master, n);  // the parameter's own elements when F32
        last.exp_avg = extend(last.exp_avg, n);
        last.exp_avg_sq = extend(last.exp_avg_sq, n);
        continue;
      }
    }
    out.push_back(std::move(t));
  }
  return out;
}

double clip_scale(double norm, double max_norm) {
  return max_norm > 0.0 && norm > max_norm ? max_norm / (norm + 1e-6) : 1.0;
}

double warmup_cosine_lr(int64_t step, int64_t warmup, int64_t total, double peak, double floor) {
  if (warmup > 0 && step <= warmup)
    return peak * static_cast<double>(step) / static_cast<double>(warmup);
  if (total <= warmup) return peak;
  const double progress =
      std::min(1.0, static_cast<double>(step - warmup) / static_cast<double>(total - warmup));
  return floor + 0.5 * (peak - floor) * (1.0 + std::cos(std::numbers::pi * progress));
}

}  // namespace microllm::train
