// The dense decoder-only transformer of the qwen2 / llama / qwen3 families, with parameters
// under their Hugging Face names.
//
//   x = embed(ids)                                            (B, T, C)
//   for each layer:
//     h = rms_norm(x)                                          input_layernorm
//     q, k, v = linear(h) (+ bias in qwen2)                    (B, T, H|Hkv, D)
//     q, k = rms_norm over D (qwen3 q_norm / k_norm)
//     q, k = rope(q, k)                                        (B, H|Hkv, T, D)
//     x, h = add_rms_norm(x, o_proj(attention(q, k, v)))       post_attention_layernorm
//     x = x + down(swiglu(gate(h), up(h)))
//   logits = lm_head(rms_norm(x))                              (B, T, V)
//
// Forward runs on the device and dtype of the parameters (CPU or CUDA; F32 or BF16 — norms,
// softmax and accumulation are F32 inside the kernels) and records autograd when
// parameters require gradients. Every intermediate value is handed to an optional observer
// under a stable name (see value_names in transformer.cpp) for alignment and debugging.
#pragma once

#include <functional>
#include <map>
#include <string>

#include "microllm/core/random.h"
#include "microllm/model/config.h"
#include "microllm/model/weights.h"
#include "microllm/ops/attention.h"

namespace microllm::model {

// Called with (name, value) for each named intermediate, in forward order.
using Observer = std::function<void(const std::string& name, const Tensor& value)>;

class Transformer {
 public:
  // Parameters allocated on `device` in `dtype`, initialized as Hugging Face does for
  // these models: normal(0, initializer_range) for matrices and embeddings, ones for norm
  // weights, zeros for biases.
  Transformer(ModelConfig config, Device device = Device::cpu(), DType dtype = DType::F32,
              uint64_t seed = 0, double initializer_range = 0.02);
  // Parameters allocated but not initialized, for loading a checkpoint over them.
  static Transformer for_loading(ModelConfig config, Device device, DType dtype);
  // Parameters that are the views of `weights` (the same storage: the inference step and
  // this Transformer see one set of weights).
  static Transformer from_weights(const ModelWeights& weights);

  const ModelConfig& config() const { return config_; }
  Device device() const { return device_; }
  DType dtype() const { return dtype_; }

  // Hugging Face name → parameter, sorted by name; the tied LM head is not listed.
  const std::map<std::string, Tensor>& parameters() const { return parameters_; }
  Tensor& parameter(const std::string& name);
  void set_requires_grad(bool requires_grad);

  // ids (B, T) integer on the model's device → logits (B, T, V) in the model's dtype.
  // positions (T) or (B, T): defaults to 0..T-1.
  Tensor forward(const Tensor& ids, const Tensor& positions = Tensor(),
                 const Observer& observer = nullptr) const;
  // The same up to the final norm: (B, T, C), what the LM head multiplies (forward =
  // linear(hidden, lm_head_weight())). For losses that never form the whole logits.
  Tensor hidden(const Tensor& ids, const Tensor& positions = Tensor(),
                const Observer& observer = nullptr) const;
  // The LM head (V, C): lm_head.weight, or the embedding when tied.
  Tensor lm_head_weight() const;

  // The attention kernel forward uses (ops::AttentionBackend; Auto by default: flash on
  // CUDA in BF16/F16 for head dims 64 and 128, the reference kernel elsewhere).
  void set_attention_backend(ops::AttentionBackend backend) { attention_backend_ = backend; }
  ops::AttentionBackend attention_backend() const { return attention_backend_; }
  // Activation recomputation per layer (autograd::checkpoint): with grad mode on, a layer
  // keeps only its inputs (x, h) for backward and runs again there; the gradients are those
  // of the recorded layers (tested bit for bit on the CPU). Off by default.
  void set_recompute(bool recompute) { recompute_ = recompute; }
  bool recompute() const { return recompute_; }

  // Mean next-token cross-entropy of `logits` (B, T, V) for `ids` (B, T): the label of
  // position t is ids[t+1] (the last position has none), as Hugging Face computes it;
  // an F32 scalar for F32, BF16 and F16 logits (F64 for F64).
  static Tensor next_token_loss(const Tensor& logits, const Tensor& ids);

 private:
  struct Uninitialized {};
  Transformer(ModelConfig config, Device device, DType dtype, Uninitialized, bool allocate = true);
  const Tensor& param(const std::string& name) const;

  ModelConfig config_;
  Device device_;
  DType dtype_;
  std::map<std::string, Tensor> parameters_;
  Tensor inv_freq_;  // (D/2) F32 on the device
  ops::AttentionBackend attention_backend_ = ops::AttentionBackend::Auto;
  bool recompute_ = false;
};

}  // namespace microllm::model
