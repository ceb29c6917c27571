// ModelConfig: the architecture of a dense decoder-only transformer, read from a Hugging
// Face config.json (model_type qwen2, llama, qwen3), and what follows from it without
// allocating weights (parameter names and shapes, counts, bytes, KV-cache size, FLOPs).
//
// Both config layouts are read: transformers 4 (rope_theta + rope_scaling) and 5
// (rope_parameters). Values microllm does not implement (another model_type, activation,
// rope type, sliding-window attention, biases Hugging Face adds that microllm lacks) are
// one clear Error naming the field and the file.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "microllm/core/tensor.h"

namespace microllm::model {

enum class Family { Qwen2, Llama, Qwen3 };

struct RopeScaling {
  enum class Type { None, Linear, Llama3 };
  Type type = Type::None;
  double factor = 1.0;                              // linear and llama3
  double low_freq_factor = 1.0;                     // llama3
  double high_freq_factor = 4.0;                    // llama3
  int64_t original_max_position_embeddings = 8192;  // llama3
};

struct ModelConfig {
  Family family = Family::Qwen2;
  int64_t vocab_size = 0;         // V
  int64_t hidden_size = 0;        // C
  int64_t intermediate_size = 0;  // F
  int64_t num_layers = 0;         // L
  int64_t num_heads = 0;          // H
  int64_t num_kv_heads = 0;       // Hkv
  int64_t head_dim = 0;           // D (explicit in llama 3.2 / qwen3, else C / H)
  int64_t max_position_embeddings = 0;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  double rms_norm_eps = 1e-6;
  bool tie_word_embeddings = false;  // LM head shares the embedding matrix
  bool qkv_bias = false;             // qwen2: q/k/v projections have biases
  bool qk_norm = false;              // qwen3: RMSNorm over D on q and k before RoPE
  int64_t bos_token_id = -1;
  std::vector<int64_t> eos_token_ids;

  // Parses a config.json object; `where` names the source in errors.
  static ModelConfig from_json(const nlohmann::json& json, const std::string& where);
  static ModelConfig load(const std::string& path);  // a config.json file or a folder holding one
  // A Hugging Face config.json (transformers 4 layout) that from_json reads back unchanged.
  nlohmann::json to_json() const;

  const char* model_type() const;                             // "qwen2", "llama", "qwen3"
  int64_t q_dim() const { return num_heads * head_dim; }      // H·D
  int64_t kv_dim() const { return num_kv_heads * head_dim; }  // Hkv·D
  // Checks the numbers are consistent (positive, H % Hkv == 0, D even, ...).
  void validate(const std::string& where) const;
};

struct ParameterSpec {
  std::string name;  // Hugging Face name, e.g. "model.layers.0.self_attn.q_proj.weight"
  Shape shape;
};

// Every parameter in Hugging Face order; the tied LM head is not listed separately.
std::vector<ParameterSpec> parameter_specs(const ModelConfig& config);
int64_t parameter_count(const ModelConfig& config);
// K and V bytes one token adds to the cache over all layers, per element size.
int64_t kv_cache_bytes_per_token(const ModelConfig& config, int64_t element_bytes);
// Forward FLOPs for one token at context length `context`: 2 per multiply-add of every
// weight matrix (LM head included) plus the attention score and value products.
double forward_flops_per_token(const ModelConfig& config, int64_t context);

// RoPE frequencies (D/2) F32 with the configured scaling applied (llama3 and linear as
// transformers' _compute_llama3_parameters / _compute_linear_scaling_rope_parameters).
Tensor rope_frequencies(const ModelConfig& config);

}  // namespace microllm::model
