// Optimizers over named parameters: AdamW (decoupled weight decay; Loshchilov & Hutter
// 2019) and SGD with momentum, both keeping F32 master weights and F32 state whatever the
// parameters' dtype (BF16 mixed precision: the model computes in BF16, the optimizer
// updates the F32 master and casts it back into the parameter).
//
// Weight decay applies to matrices (rank ≥ 2) only, not to norm weights and biases, as
// common practice (e.g. nanoGPT, Hugging Face Trainer).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "microllm/core/tensor.h"
#include "microllm/ops/adamw.h"

namespace microllm::train {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

// One tensor an optimizer updates, with whether weight decay applies to it. Data-parallel
// ZeRO-1 passes flat slices of parameters here, so the decay flag cannot come from the
// slice's rank.
struct OptimizerParam {
  OptimizerParam(std::string name, Tensor param, bool decay)
      : name(std::move(name)), param(std::move(param)), decay(decay) {}
  std::string name;
  Tensor param;
  bool decay;
};

class Optimizer {
 public:
  // Named parameters; weight decay applies to those of rank ≥ 2.
  explicit Optimizer(const std::map<std::string, Tensor>& params);
  // `flat`: the (P) buffer every parameter is a dense view of (model::ModelWeights::flat()),
  // or undefined. With it the optimizer is flat (DESIGN §5): the master weights, its state
  // and the gradients are (P) buffers laid out as `flat`, each parameter's gradient
  // accumulates in place into its view (Tensor::set_grad_buffer), gradient_norm() is one
  // reduction, and the fused update runs over neighbouring tensors as one. The values are
  // those of the per-tensor optimizer; only the gradient norm's summation order differs.
  explicit Optimizer(const std::vector<OptimizerParam>& params, const Tensor& flat = Tensor());
  virtual ~Optimizer() = default;

  // One update at learning rate `lr` from the parameters' current .grad (parameters
  // without a gradient are left alone). Gradients are not cleared.
  virtual void step(double lr) = 0;
  // The next step first multiplies every gradient by `scale` (rounded to the gradient's
  // dtype), as clipping the gradients in place would; the step after it uses 1 again.
  // Lets a clip computed elsewhere (gradient_norm, clip_scale) skip rewriting the gradients.
  void set_grad_scale(double scale) { grad_scale_ = scale; }
  // Drops every parameter's gradient.
  void zero_grad();
  int64_t steps_taken() const { return steps_; }
  bool flat() const { return flat_grad_.defined(); }
  // The global L2 norm of the parameters' gradients through ops::sum_of_squares (one
  // device read). Flat: always over the flat gradient buffer, so that the summation order
  // does not depend on where the gradients are held — a gradient held elsewhere (data
  // parallel's bucket slot) is first copied into its view, and the view of a parameter
  // without a gradient this pass is zeroed. Otherwise over the gradient tensors. Parameters
  // without a gradient count as zero.
  double gradient_norm();

  // State for checkpoints: "master.NAME" and the optimizer's own tensors ("exp_avg.NAME",
  // ...), plus the step count. load_state expects exactly what state() produced.
  virtual NamedTensors state() const;
  virtual void load_state(const std::map<std::string, Tensor>& tensors, int64_t steps);
  // The prefixes state() uses, in its order: "master" first, then the optimizer's own.
  virtual std::vector<std::string> state_prefixes() const { return {"master"}; }

 protected:
  struct Slot {
    std::string name;
    Tensor param;        // the model's parameter (any dtype, any device)
    Tensor master;       // F32 weights; the parameter itself when it is F32
    bool decay;          // weight decay applies (rank ≥ 2)
    int64_t offset = 0;  // flat optimizers: elements from the flat buffer's start
  };
  // Zeroed F32 tensors shaped as the slots' masters, for the optimizer's own state: views
  // into one new (P) buffer when the optimizer is flat, else one tensor per slot.
  std::vector<Tensor> make_state() const;
  // Writes the master weights back into the parameters (a cast when they differ).
  void publish(Slot& slot);
  // The pending gradient scale, reset to 1 (for step() to use once).
  double take_grad_scale();
  // Multiplies the gradients by `scale` in place (the reference path of set_grad_scale).
  void scale_gradients(double scale);
  std::vector<Slot> slots_;
  Tensor flat_grad_;  // (P) in the parameters' dtype, zeros outside the views; flat only
  int64_t steps_ = 0;
  double grad_scale_ = 1.0;
};

struct AdamWOptions {
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;
  // One multi-tensor kernel per batch of parameters (ops::adamw_step) instead of the
  // elementwise operators: the same bits, far fewer launches.
  bool fused = false;
};

class AdamW final : public Optimizer {
 public:
  AdamW(const std::map<std::string, Tensor>& params, AdamWOptions options);
  AdamW(const std::vector<OptimizerParam>& params, AdamWOptions options,
        const Tensor& flat = Tensor());
  void step(double lr) override;
  NamedTensors state() const override;
  void load_state(const std::map<std::string, Tensor>& tensors, int64_t steps) override;
  std::vector<std::string> state_prefixes() const override {
    return {"master", "exp_avg", "exp_avg_sq"};
  }

 private:
  void init_state();
  bool fused_tensors_current() const;
  AdamWOptions options_;
  std::vector<Tensor> exp_avg_, exp_avg_sq_;  // F32, one per slot
  // The fused update's tensors, coalesced, kept while every slot's gradient is the same view
  // of the flat gradient buffer as when they were built (fused_grads_, one per slot): then
  // they are the same every step, and the host does not rebuild some 300 views a step while
  // the device waits after the gradient norm's read. Empty otherwise.
  std::vector<ops::AdamWTensors> fused_tensors_;
  std::vector<Tensor> fused_grads_;
};

struct SgdOptions {
  double momentum = 0.9;
  double weight_decay = 0.0;
};

class Sgd final : public Optimizer {
 public:
  Sgd(const std::map<std::string, Tensor>& params, SgdOptions options);
  Sgd(const std::vector<OptimizerParam>& params, SgdOptions options, const Tensor& flat = Tensor());
  void step(double lr) override;
  NamedTensors state() const override;
  void load_state(const std::map<std::string, Tensor>& tensors, int64_t steps) override;
  std::vector<std::string> state_prefixes() const override { return {"master", "momentum"}; }

 private:
  void init_state();
  SgdOptions options_;
  std::vector<Tensor> velocity_;  // F32, one per slot
};

// "adamw" or "sgd" over `params` (flat over `flat` when it is defined; see Optimizer);
// another name is an Error.
std::unique_ptr<Optimizer> make_optimizer(const std::string& kind,
                                          const std::vector<OptimizerParam>& params,
                                          const AdamWOptions& adamw, const SgdOptions& sgd,
                                          const Tensor& flat = Tensor());
// Named parameters in map order, weight decay on those of rank ≥ 2.
std::vector<OptimizerParam> optimizer_params(const std::map<std::string, Tensor>& params);

// Scales all gradients so their global L2 norm is at most `max_norm` (no-op when
// max_norm ≤ 0). Returns the norm before clipping. Reads one number from the device.
double clip_grad_norm(const std::map<std::string, Tensor>& params, double max_norm);

// The global L2 norm of all gradients through ops::sum_of_squares (a few launches; one
// device read). Close to clip_grad_norm's norm but summed in another order.
double gradient_norm(const std::map<std::string, Tensor>& params);
// Entries of a multi-tensor AdamW update merged where they can be one: sorted by address,
// neighbours whose five tensors each continue the previous one's (dense, same storage,
// adjacent) and whose decay flag agrees become one entry of flat (N) views. The update of
// the merged list is the update of the list, element for element.
std::vector<ops::AdamWTensors> coalesce_adamw(std::vector<ops::AdamWTensors> tensors);
// The factor clip_grad_norm scales gradients by for a norm: max_norm / (norm + 1e-6) when
// max_norm > 0 and norm > max_norm, else 1.
double clip_scale(double norm, double max_norm);

// Linear warmup for `warmup` steps, then cosine decay from `peak` to `floor` at `total`.
// `step` counts from 1.
double warmup_cosine_lr(int64_t step, int64_t warmup, int64_t total, double peak, double floor);

}  // namespace microllm::train
