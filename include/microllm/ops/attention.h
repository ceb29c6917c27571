// Causal scaled-dot-product attention with grouped-query heads (GQA).
//
// Reference algorithm: S = Q·Kᵀ·scale, mask keys whose position is after the query's,
// P = softmax(S) in F32 (F64 for F64 inputs), O = P·V. Query head h reads KV head
// h / (H / Hkv). A query that sees no key (possible with explicit positions) gets an output
// of zeros and zero gradients, where a plain softmax over −inf would give NaN. This interface (Q,
// K, V, causal, scale, positions) is the one every attention backend keeps.
#pragma once

#include <cmath>
#include <string>

#include "microllm/core/tensor.h"

namespace microllm::ops {

// Which kernel computes attention. Reference: the materialized-probabilities kernel (CPU and
// CUDA, every dtype and head dim). Flash: the tiled tensor-core kernels (CUDA, bf16/f16,
// head dims 64 and 128), which save one log-sum-exp per query instead of the (T, S)
// probabilities. Auto: flash where it applies, else the reference.
enum class AttentionBackend { Auto, Reference, Flash };

struct AttentionOptions {
  bool causal = true;
  // Multiplies Q·Kᵀ; NaN means 1/sqrt(D).
  double scale = NAN;
  // Positions of the T queries (T) and S keys (S), integer. Undefined: keys 0..S-1 and
  // queries S-T..S-1 (the queries are the last T tokens, as in prefill or decode).
  Tensor q_positions;
  Tensor k_positions;
  AttentionBackend backend = AttentionBackend::Auto;
};

// Parses "auto", "reference" or "flash"; anything else is an Error naming the choices.
AttentionBackend parse_attention_backend(const std::string& name);
const char* attention_backend_name(AttentionBackend backend);

// q (B, H, T, D); k, v (B, Hkv, S, D) with H % Hkv == 0 → (B, H, T, D)
Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v,
                 const AttentionOptions& options = {});

}  // namespace microllm::ops
