// A tiny model of each family for CPU model tests: 2 layers, 16 wide, 4 query / 2 KV heads
// (qwen3 with head_dim 6 ≠ C / H, qwen2 with QKV bias, llama with an untied LM head).
#pragma once

#include "microllm/model/config.h"

namespace microllm::testing {

inline model::ModelConfig tiny_config(model::Family family) {
  model::ModelConfig c;
  c.family = family;
  c.vocab_size = 37;
  c.hidden_size = 16;
  c.intermediate_size = 24;
  c.num_layers = 2;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = family == model::Family::Qwen3 ? 6 : 4;  // qwen3: head_dim ≠ C / H
  c.max_position_embeddings = 64;
  c.qkv_bias = family == model::Family::Qwen2;
  c.qk_norm = family == model::Family::Qwen3;
  c.tie_word_embeddings = family != model::Family::Llama;
  return c;
}

}  // namespace microllm::testing
