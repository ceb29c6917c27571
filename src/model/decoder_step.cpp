// DecoderStep (see decoder_step.h).
#include "microllm/model/decoder_step.h"

#include <cmath>

#include "microllm/ops/kv_write.h"
#include "microllm/ops/ops.h"
#include "microllm/ops/paged_attention.h"

namespace microllm::model {

struct DecoderStep::Workspace {
  Tensor attention_scratch;  // F32, paged_attention_workspace_bytes for the limits
};

DecoderStep::DecoderStep(const ModelWeights& weights, StepLimits limits)
    : weights_(weights), limits_(limits), ws_(std::make_shared<Workspace>()) {
  MICROLLM_CHECK(limits.max_tokens > 0 && limits.max_seqs > 0 && limits.max_blocks_per_seq > 0 &&
                     limits.block_size > 0,
                 "DecoderStep", "limits must be positive, found max_tokens ", limits.max_tokens,
                 ", max_seqs ", limits.max_seqs, ", max_blocks_per_seq ", limits.max_blocks_per_seq,
                 ", block_size ", limits.block_size);
  const ModelConfig& c = weights.config();
  const int64_t bytes = ops::paged_attention_workspace_bytes(
      limits.max_tokens, c.num_heads, c.num_kv_heads, c.head_dim,
      limits.max_blocks_per_seq * limits.block_size);
  if (bytes > 0)
    ws_->attention_scratch = Tensor::empty({(bytes + 3) / 4}, DType::F32, weights.device());
}

int64_t DecoderStep::workspace_bytes() const {
  return ws_->attention_scratch.defined() ? static_cast<int64_t>(ws_->attention_scratch.nbytes())
                                          : 0;
}

Tensor DecoderStep::forward(
    const StepBatch& batch, const std::vector<LayerKv>& kv,
    const std::function<void(const std::string&, const Tensor&)>& observe) const {
  const ModelConfig& c = weights_.config();
  const int64_t N = batch.num_tokens, B = batch.num_seqs, H = c.num_heads, Hkv = c.num_kv_heads,
                D = c.head_dim, qd = c.q_dim(), kvd = c.kv_dim();
  MICROLLM_CHECK(N > 0 && N <= limits_.max_tokens && B > 0 && B <= limits_.max_seqs, "DecoderStep",
                 "step of ", N, " tokens and ", B, " sequences is outside the limits (",
                 limits_.max_tokens, " tokens, ", limits_.max_seqs, " sequences)");
  MICROLLM_CHECK(static_cast<int64_t>(kv.size()) == c.num_layers, "DecoderStep", "expected ",
                 c.num_layers, " layers of KV cache, found ", kv.size());
  const double eps = c.rms_norm_eps;
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  auto emit = [&](const std::string& name, const Tensor& value) {
    if (observe) observe(name, value);
  };
  const Tensor ids = batch.token_ids.narrow(0, 0, N);                     // (N)
  const Tensor positions = batch.positions.narrow(0, 0, N).view({N, 1});  // (N, 1): T = 1 per row
  const Tensor slots = batch.slot_mapping.narrow(0, 0, N);                // (N)
  const int64_t M = batch.block_tables.size(1);
  const int64_t max_seq_len = batch.max_seq_len > 0 ? batch.max_seq_len : M * limits_.block_size;

  Tensor x = ops::embedding(weights_.embed(), ids);  // (N, C)
  emit("embedding", x);
  Tensor h = ops::rms_norm(x, weights_.layers()[0].input_norm, eps);  // (N, C)
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const LayerWeights& w = weights_.layers()[static_cast<size_t>(i)];
    const std::string n = "layers." + std::to_string(i) + ".";
    emit(n + "input", x);
    emit(n + "attn.norm", h);
    const Tensor qkv = ops::linear(h, w.qkv, w.qkv_bias);    // (N, H·D + 2·Hkv·D)
    Tensor q = qkv.narrow(1, 0, qd).reshape({N, H, D});      // (N, H, D)
    Tensor k = qkv.narrow(1, qd, kvd).reshape({N, Hkv, D});  // (N, Hkv, D)
    const Tensor v = qkv.narrow(1, qd + kvd, kvd).contiguous().view({N, Hkv, D});  // (N, Hkv, D)
    if (c.qk_norm) {
      q = ops::rms_norm(q, w.q_norm, eps);
      k = ops::rms_norm(k, w.k_norm, eps);
    }
    // Each row is its own (batch, T = 1) for RoPE: (N, H, 1, D) with positions (N, 1).
    q = ops::rope(q.view({N, H, 1, D}), positions, weights_.inv_freq()).view({N, H, D});
    k = ops::rope(k.view({N, Hkv, 1, D}), positions, weights_.inv_freq()).view({N, Hkv, D});
    emit(n + "attn.q", q);
    emit(n + "attn.k", k);
    emit(n + "attn.v", v);
    const LayerKv& cache = kv[static_cast<size_t>(i)];
    ops::kv_write(k, v, slots, cache.k, cache.v);
    Tensor a = Tensor::empty({N, H, D}, q.dtype(), q.device());  // (N, H, D)
    ops::paged_attention(q, cache.k, cache.v, batch.query_starts.narrow(0, 0, B + 1),
                         batch.seq_lens.narrow(0, 0, B), batch.block_tables.narrow(0, 0, B), scale,
                         max_seq_len, a, ws_->attention_scratch);
    const Tensor attn_out = ops::linear(a.view({N, qd}), w.o_proj);  // (N, C)
    emit(n + "attn.out", attn_out);
    ops::AddRmsNormResult r = ops::add_rms_norm(x, attn_out, w.post_norm, eps);
    emit(n + "attn.residual", r.sum);
    emit(n + "mlp.norm", r.normed);
    const int64_t F = c.intermediate_size;
    const Tensor gate_up = ops::linear(r.normed, w.gate_up);                           // (N, 2F)
    const Tensor act = ops::swiglu(gate_up.narrow(1, 0, F), gate_up.narrow(1, F, F));  // (N, F)
    emit(n + "mlp.act", act);
    const Tensor mlp_out = ops::linear(act, w.down);  // (N, C)
    emit(n + "mlp.out", mlp_out);
    const Tensor& next_norm = i + 1 < c.num_layers
                                  ? weights_.layers()[static_cast<size_t>(i + 1)].input_norm
                                  : weights_.final_norm();
    ops::AddRmsNormResult next = ops::add_rms_norm(r.sum, mlp_out, next_norm, eps);
    x = next.sum;
    h = next.normed;
    emit(n + "output", x);
  }
  emit("final_norm", h);
  // The LM head reads only each sequence's last new token.
  const Tensor last = ops::embedding(h, batch.last_rows.narrow(0, 0, B));  // (B, C)
  Tensor logits = ops::linear(last, weights_.lm_head());                   // (B, V)
  emit("logits", logits);
  return logits;
}

}  // namespace microllm::model
