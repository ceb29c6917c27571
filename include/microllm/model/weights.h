// ModelWeights: every parameter of a dense decoder in one flat buffer (DESIGN §5), with
// tensors as views into it, in Hugging Face orientation ([out, in], row-major; DESIGN §6).
//
// Per layer, the Q, K and V projections are one fused (H·D + 2·Hkv·D, C) matrix and gate and
// up one (2F, C) matrix, so the inference step does one GEMM for each; the Hugging Face
// parameters (q_proj, k_proj, v_proj, gate_proj, up_proj) are row views of the fused
// matrices, so loading, saving and the training Transformer see the usual names.
//
// Flat layout (elements of `dtype`, each tensor 256 bytes aligned from the buffer's start):
//   model.embed_tokens.weight                         (V, C)
//   for each layer i:
//     input_layernorm.weight                          (C)
//     qkv   = [q_proj; k_proj; v_proj].weight         (H·D + 2·Hkv·D, C)
//     qkv bias = [q; k; v].bias (qwen2)               (H·D + 2·Hkv·D)
//     q_norm.weight, k_norm.weight (qwen3)            (D), (D)
//     o_proj.weight                                   (C, H·D)
//     post_attention_layernorm.weight                 (C)
//     gate_up = [gate_proj; up_proj].weight           (2F, C)
//     down_proj.weight                                (C, F)
//   model.norm.weight                                 (C)
//   lm_head.weight (untied only)                      (V, C)
#pragma once

#include <map>
#include <string>
#include <vector>

#include "microllm/model/config.h"

namespace microllm::model {

// The views of one decoder layer.
struct LayerWeights {
  Tensor input_norm;  // (C)
  Tensor qkv;         // (H·D + 2·Hkv·D, C) rows: q_proj, k_proj, v_proj
  Tensor qkv_bias;    // (H·D + 2·Hkv·D) or undefined (no attention bias)
  Tensor q_norm;      // (D) or undefined (no QK-norm)
  Tensor k_norm;      // (D) or undefined
  Tensor o_proj;      // (C, H·D)
  Tensor post_norm;   // (C)
  Tensor gate_up;     // (2F, C) rows: gate_proj, up_proj
  Tensor down;        // (C, F)
};

class ModelWeights {
 public:
  // Allocated, not initialized.
  ModelWeights(ModelConfig config, Device device, DType dtype);
  // Initialized exactly as Transformer(config, device, dtype, seed, initializer_range) is:
  // the same values in the same parameters.
  static ModelWeights random(ModelConfig config, Device device, DType dtype, uint64_t seed = 0,
                             double initializer_range = 0.02);
  // A Hugging Face folder: config.json and model.safetensors or a sharded
  // model.safetensors.index.json; F32/BF16/F16 on disk are converted to `dtype`. Strict:
  // a missing, unexpected or mis-shaped tensor is an Error naming each one.
  static ModelWeights load(const std::string& dir, Device device, DType dtype);

  const ModelConfig& config() const { return config_; }
  Device device() const { return device_; }
  DType dtype() const { return dtype_; }

  // Hugging Face name → view, sorted by name (the tied LM head is not listed), as
  // Transformer::parameters() lists them.
  const std::map<std::string, Tensor>& named() const { return named_; }
  // (P) the buffer every view points into, padding included.
  const Tensor& flat() const { return flat_; }

  const Tensor& embed() const { return embed_; }  // (V, C)
  const std::vector<LayerWeights>& layers() const { return layers_; }
  const Tensor& final_norm() const { return final_norm_; }  // (C)
  const Tensor& lm_head() const { return lm_head_; }        // (V, C), the embedding when tied
  const Tensor& inv_freq() const { return inv_freq_; }      // (D/2) F32, scaling applied

 private:
  ModelConfig config_;
  Device device_;
  DType dtype_;
  Tensor flat_;  // (P)
  std::map<std::string, Tensor> named_;
  Tensor embed_, final_norm_, lm_head_, inv_freq_;
  std::vector<LayerWeights> layers_;
};

}  // namespace microllm::model
