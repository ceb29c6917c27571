// The decoder-only transformer (see transformer.h). Names of the observed values:
//   embedding                          (B, T, C)
//   layers.{i}.input                   (B, T, C) residual stream entering the block
//   layers.{i}.attn.norm               (B, T, C) input_layernorm output
//   layers.{i}.attn.q / .k / .v        (B, H|Hkv, T, D) after QK-norm and RoPE (q, k)
//   layers.{i}.attn.out                (B, T, C) o_proj output
//   layers.{i}.attn.residual           (B, T, C) x + attention
//   layers.{i}.mlp.norm                (B, T, C) post_attention_layernorm output
//   layers.{i}.mlp.act                 (B, T, F) swiglu(gate, up)
//   layers.{i}.mlp.out                 (B, T, C) down_proj output
//   layers.{i}.output                  (B, T, C) residual stream leaving the block
//   final_norm                         (B, T, C)
//   logits                             (B, T, V)
#include "microllm/model/transformer.h"

#include "microllm/autograd/checkpoint.h"
#include "microllm/autograd/node.h"
#include "microllm/core/switch.h"

#include "microllm/ops/ops.h"

namespace microllm::model {

Transformer::Transformer(ModelConfig config, Device device, DType dtype, uint64_t seed,
                         double initializer_range)
    : config_(std::move(config)), device_(device), dtype_(dtype) {
  config_.validate("Transformer");
  MICROLLM_CHECK(is_floating(dtype), "Transformer", "parameters must be floating, found ", dtype);
  Generator gen(seed);
  for (const ParameterSpec& spec : parameter_specs(config_)) {
    Tensor t;  // spec.shape: a weight matrix (out, in), the embedding (V, C) or a vector (C)
    const bool is_vector = spec.shape.size() == 1;
    if (is_vector && spec.name.ends_with(".bias"))
      t = Tensor::zeros(spec.shape, dtype, device);
    else if (is_vector)
      t = Tensor::ones(spec.shape, dtype, device);
    else
      t = randn(spec.shape, gen, dtype, device, 0.0, initializer_range);
    parameters_.emplace(spec.name, t);
  }
  inv_freq_ = rope_frequencies(config_).to(device);
}

Transformer::Transformer(ModelConfig config, Device device, DType dtype, Uninitialized,
                         bool allocate)
    : config_(std::move(config)), device_(device), dtype_(dtype) {
  config_.validate("Transformer");
  MICROLLM_CHECK(is_floating(dtype), "Transformer", "parameters must be floating, found ", dtype);
  if (allocate)
    for (const ParameterSpec& spec : parameter_specs(config_))
      parameters_.emplace(spec.name, Tensor::empty(spec.shape, dtype, device));
  inv_freq_ = rope_frequencies(config_).to(device);
}

Transformer Transformer::for_loading(ModelConfig config, Device device, DType dtype) {
  return Transformer(std::move(config), device, dtype, Uninitialized{});
}

Transformer Transformer::from_weights(const ModelWeights& weights) {
  Transformer t(weights.config(), weights.device(), weights.dtype(), Uninitialized{},
                /*allocate=*/false);
  t.parameters_ = weights.named();
  return t;
}

Tensor& Transformer::parameter(const std::string& name) {
  auto it = parameters_.find(name);
  MICROLLM_CHECK(it != parameters_.end(), "Transformer", "no parameter named '", name, "'");
  return it->second;
}

const Tensor& Transformer::param(const std::string& name) const {
  auto it = parameters_.find(name);
  MICROLLM_CHECK(it != parameters_.end(), "Transformer", "no parameter named '", name, "'");
  return it->second;
}

void Transformer::set_requires_grad(bool requires_grad) {
  for (auto& [name, t] : parameters_) t.set_requires_grad(requires_grad);
}

Tensor Transformer::lm_head_weight() const {
  return param(config_.tie_word_embeddings ? "model.embed_tokens.weight" : "lm_head.weight");
}

Tensor Transformer::forward(const Tensor& ids, const Tensor& positions,
                            const Observer& observe) const {
  const Tensor h = hidden(ids, positions, observe);  // (B, T, C)
  Tensor logits = ops::linear(h, lm_head_weight());  // (B, T, V)
  if (observe) observe("logits", logits);
  return logits;
}

Tensor Transformer::hidden(const Tensor& ids, const Tensor& positions_in,
                           const Observer& observe) const {
  MICROLLM_CHECK(ids.defined() && ids.dim() == 2, "Transformer::forward",
                 "ids must be (B, T), found ", ids.describe());
  MICROLLM_CHECK(ids.device() == device_, "Transformer::forward", "ids ", ids.describe(),
                 " are not on the model's device ", device_);
  const ModelConfig& c = config_;
  const int64_t B = ids.size(0), T = ids.size(1), H = c.num_heads, Hkv = c.num_kv_heads,
                D = c.head_dim;
  const double eps = c.rms_norm_eps;
  auto emit = [&](const std::string& name, const Tensor& value) {
    if (observe) observe(name, value);
  };
  // (T) or (B, T)
  const Tensor positions =
      positions_in.defined() ? positions_in : Tensor::arange(T, DType::I64, device_);
  ops::AttentionOptions attention_options;
  attention_options.causal = true;
  attention_options.backend = attention_backend_;
  // Without given positions attention takes its defaults (0..T-1), which let the flash
  // kernels skip the tiles above the causal diagonal.
  const bool explicit_positions = positions_in.defined() && positions_in.dim() == 1;
  attention_options.q_positions = explicit_positions ? positions_in : Tensor();
  attention_options.k_positions = explicit_positions ? positions_in : Tensor();

  Tensor x = ops::embedding(param("model.embed_tokens.weight"), ids);  // (B, T, C)
  emit("embedding", x);
  // (B, T, C)
  Tensor h = ops::rms_norm(x, param("model.layers.0.input_layernorm.weight"), eps);
  // The MLP's swiglu(gate, up) of h (B, T, C) for layer prefix p, → (B, T, F):
  //   - separate: two projections;
  //   - joined (the default; MICROLLM_JOIN_GATE_UP=0 gives the separate form,
  //     docs/optimization-log.md): gate and up as one projection, as Q/K/V — the joined (2F, C)
  //     weight (a view of ModelWeights' gate/up block), one GEMM forward and one each for dX and dW
  //     backward; swiglu reads the two halves in place and writes their gradients as halves of one
  //     buffer, so the split's backward joins them without a copy.
  const bool join_gate_up = !switch_off("MICROLLM_JOIN_GATE_UP");
  auto mlp_act = [this, &c, join_gate_up](const Tensor& h, const std::string& p) {
    const Tensor& gate = param(p + "mlp.gate_proj.weight");  // (F, C)
    const Tensor& up = param(p + "mlp.up_proj.weight");      // (F, C)
    if (!join_gate_up) return ops::swiglu(ops::linear(h, gate), ops::linear(h, up));
    const Tensor gate_up = ops::linear(h, ops::join({gate, up}, 0));  // (B, T, 2F)
    const std::vector<Tensor> halves =
        ops::split(gate_up, 2, {c.intermediate_size, c.intermediate_size});
    return ops::swiglu(halves[0], halves[1]);
  };
  // Q, K and V from the joined projection's output (B, T, H + 2·Hkv, D):
  //   - without q/k norms (the default; MICROLLM_FUSED_QKV_HEADS=0 gives the unfused form,
  //     docs/optimization-log.md), ops::rope_qkv_heads: the dense operands in one pass, and
  //     one pass back for the gradient;
  //   - unfused (and with q/k norms, which sit between the split and rope): views, rope on
  //     the transposed query and key views, the values made dense by attention.
  // Both give the same bits.
  const bool fuse_qkv_heads = !switch_off("MICROLLM_FUSED_QKV_HEADS");
  // Layer i: (x, h) → (the residual stream leaving it, the next norm's output). `watch`
  // says whether the observer sees its values (not when it is recomputed for backward).
  auto layer = [this, &c, B, T, H, Hkv, D, eps, positions, attention_options, observe, mlp_act,
                fuse_qkv_heads](int64_t i, const Tensor& x, const Tensor& h, bool watch) {
    auto show = [&](const std::string& name, const Tensor& value) {
      if (watch && observe) observe(name, value);
    };
    const std::string p = "model.layers." + std::to_string(i) + ".";
    const std::string n = "layers." + std::to_string(i) + ".";
    // Q, K and V as one projection: the three weights (and biases) joined into one
    // (H·D + 2·Hkv·D, C) matrix — a view when they are the row blocks of ModelWeights' fused
    // matrix — so forward and backward each run one GEMM, and q, k, v are views of its output.
    auto joined = [&](const char* suffix) {
      const std::string a = p + "self_attn.";
      return ops::join({param(a + "q_proj." + suffix), param(a + "k_proj." + suffix),
                        param(a + "v_proj." + suffix)},
                       0);
    };
    show(n + "input", x);
    show(n + "attn.norm", h);
    // (B, T, H + 2·Hkv, D)
    const Tensor qkv = ops::linear(h, joined("weight"), c.qkv_bias ? joined("bias") : Tensor())
                           .view({B, T, H + 2 * Hkv, D});
    // q (B, H, T, D), k and v (B, Hkv, T, D): the attention's operands
    Tensor q, k, v;
    if (fuse_qkv_heads && !c.qk_norm) {
      ops::QkvHeads heads = ops::rope_qkv_heads(qkv, H, Hkv, positions, inv_freq_);
      q = heads.q, k = heads.k, v = heads.v;
    } else {
      // q (B, T, H, D), k and v (B, T, Hkv, D): views of qkv
      const std::vector<Tensor> parts = ops::split(qkv, 2, {H, Hkv, Hkv});
      q = parts[0], k = parts[1], v = parts[2];
      if (c.qk_norm) {
        q = ops::rms_norm(q, param(p + "self_attn.q_norm.weight"), eps);
        k = ops::rms_norm(k, param(p + "self_attn.k_norm.weight"), eps);
      }
      q = ops::rope(q.transpose(1, 2), positions, inv_freq_);  // (B, H, T, D)
      k = ops::rope(k.transpose(1, 2), positions, inv_freq_);  // (B, Hkv, T, D)
      v = v.transpose(1, 2);                                   // (B, Hkv, T, D)
    }
    show(n + "attn.q", q);
    show(n + "attn.k", k);
    show(n + "attn.v", v);
    // (B, T, H·D)
    const Tensor a =
        ops::attention(q, k, v, attention_options).transpose(1, 2).reshape({B, T, H * D});
    const Tensor attn_out = ops::linear(a, param(p + "self_attn.o_proj.weight"));  // (B, T, C)
    show(n + "attn.out", attn_out);
    // r.sum, r.normed: (B, T, C)
    ops::AddRmsNormResult r =
        ops::add_rms_norm(x, attn_out, param(p + "post_attention_layernorm.weight"), eps);
    show(n + "attn.residual", r.sum);
    show(n + "mlp.norm", r.normed);
    const Tensor act = mlp_act(r.normed, p);  // (B, T, F)
    show(n + "mlp.act", act);
    const Tensor mlp_out = ops::linear(act, param(p + "mlp.down_proj.weight"));  // (B, T, C)
    show(n + "mlp.out", mlp_out);
    // The next norm is fused with this residual add: the next layer's input_layernorm,
    // or the final norm after the last layer.
    const std::string next_norm =
        i + 1 < c.num_layers ? "model.layers." + std::to_string(i + 1) + ".input_layernorm.weight"
                             : "model.norm.weight";
    // next.sum, next.normed: (B, T, C)
    ops::AddRmsNormResult next = ops::add_rms_norm(r.sum, mlp_out, param(next_norm), eps);
    show(n + "output", next.sum);
    return std::vector<Tensor>{next.sum, next.normed};
  };
  for (int64_t i = 0; i < c.num_layers; ++i) {
    std::vector<Tensor> out;
    if (recompute_ && autograd::grad_mode_enabled()) {
      // Only (x, h) is kept for backward; the layer runs again there (unobserved).
      bool first = true;
      out = autograd::checkpoint("layer",
                                 [layer, i, first](const std::vector<Tensor>& in) mutable {
                                   const bool watch = first;
                                   first = false;
                                   return layer(i, in[0], in[1], watch);
                                 },
                                 {x, h});
    } else {
      out = layer(i, x, h, true);
    }
    x = out[0];
    h = out[1];
  }
  emit("final_norm", h);
  return h;
}

Tensor Transformer::next_token_loss(const Tensor& logits, const Tensor& ids) {
  MICROLLM_CHECK(logits.dim() == 3 && ids.dim() == 2 && logits.size(0) == ids.size(0) &&
                     logits.size(1) == ids.size(1),
                 "next_token_loss", "expected logits (B, T, V) and ids (B, T), found ",
                 logits.describe(), " and ", ids.describe());
  const int64_t B = ids.size(0), T = ids.size(1), V = logits.size(2);
  MICROLLM_CHECK(T >= 2, "next_token_loss", "need at least two tokens per row, found T=", T);
  const Tensor predicted = logits.narrow(1, 0, T - 1).reshape({B * (T - 1), V});  // (B·(T−1), V)
  const Tensor labels = ids.narrow(1, 1, T - 1).reshape({B * (T - 1)});           // (B·(T−1))
  // BF16/F16 logits give an F32 loss (computed in F32 either way); F32 and F64 keep theirs.
  const DType loss_dtype = logits.dtype() == DType::F64 ? DType::F64 : DType::F32;
  return ops::cross_entropy(predicted, labels, -100, loss_dtype);
}

}  // namespace microllm::model
