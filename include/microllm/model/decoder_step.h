// DecoderStep: the graph-free inference forward (DESIGN §3, INFERENCE.md). One call runs a
// flattened StepBatch — prefill chunks and decode tokens of many sequences together —
// through every layer, writes the new K/V into the paged cache, and returns the logits of
// each sequence's last new token.
//
//   x = embed(token_ids)                                   (N, C)
//   for each layer:
//     h = rms_norm(x)                                      input_layernorm
//     q, k, v = split(h · qkvᵀ + bias)                     (N, H|Hkv, D)
//     q, k = rms_norm over D (qwen3), rope(positions)
//     kv_write(k, v → cache at slot_mapping)
//     a = paged_attention(q, cache, block_tables)          (N, H, D)
//     x, h = add_rms_norm(x, a · o_projᵀ)                  post_attention_layernorm
//     x = x + swiglu(h · gate_upᵀ) · downᵀ
//   logits = lm_head(final_norm(x)[last_rows])             (B, V)
//
// The model is stateless: weights, the step and views of the KV pools come in as
// arguments. The workspace is allocated once, at construction, for the largest step the
// limits allow; a step allocates nothing after that, records no autograd and reads nothing
// back from the device. Named values as Transformer's (layers.{i}.attn.q ...), with the
// flattened shapes (N, ...) instead of (B, T, ...); an observer sees workspace views that
// later operators overwrite (the residual stream is updated in place), so it copies what it
// keeps. CPU steps compute in F32 (or F64); CUDA steps in F32, BF16 or F16.
//
// On CUDA, a step of at most 4 sequences (8 in BF16/F16) runs its decode rows through the
// GEMV (ops::gemv_out: 1–4 rows on the CUDA cores, 5–8 on tensor cores); when every
// row is a decode row and nobody observes, the norms run inside the GEMVs (prologue) and the
// residual adds in their epilogues: per layer the QKV GEMV (norm; RoPE and the KV write in
// its epilogue, but for qwen3's QK-norm), attention, the O GEMV (+ x), the gate/up GEMV
// (norm, SwiGLU) and the down GEMV (+ x), with the bits of the unfused operators an
// observer sees. MICROLLM_DECODE_FUSION=0 (read at construction) keeps the unfused
// operators, for measurements.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "microllm/model/step_batch.h"
#include "microllm/model/weights.h"

namespace microllm::model {

struct StepLimits {
  int64_t max_tokens = 0;          // N: new tokens in one step
  int64_t max_seqs = 0;            // B: sequences in one step
  int64_t max_blocks_per_seq = 0;  // M: block-table width
  int64_t block_size = 16;         // BS
};

class DecoderStep {
 public:
  DecoderStep(const ModelWeights& weights, StepLimits limits);

  // Runs `batch` and returns the logits (num_seqs, V) in the weights' dtype: a view into the
  // workspace, valid until the next forward. `kv` holds one LayerKv per layer.
  Tensor forward(
      const StepBatch& batch, const std::vector<LayerKv>& kv,
      const std::function<void(const std::string&, const Tensor&)>& observe = nullptr) const;

  const StepLimits& limits() const { return limits_; }
  // Bytes of the workspace (activations and attention scratch) allocated at construction.
  int64_t workspace_bytes() const;

 private:
  const ModelWeights& weights_;
  StepLimits limits_;
  bool fuse_decode_;  // the fused decode layer (MICROLLM_DECODE_FUSION=0 turns it off)
  struct Workspace;
  std::shared_ptr<Workspace> ws_;
};

}  // namespace microllm::model
