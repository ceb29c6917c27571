// SamplingParams: how one request's next tokens are chosen and when it stops, as plain
// values (no tensors); StepInputs copies them into per-row arrays for the device sampler.
//
// The sampler's order is transformers' (LogitsProcessorList then warpers): repetition,
// frequency and presence penalties over the row's history, then temperature, top-k, top-p,
// min-p, then a draw from a counter-based generator keyed by (seed, token index).
// temperature 0 is greedy: the argmax of the penalized logits (transformers applies the
// repetition penalty in greedy search too); top-k, top-p and min-p are then bypassed.
// Penalties: repetition_penalty divides positive logits and multiplies negative ones of
// every token in prompt + output (Keskar et al. 2019, transformers'
// RepetitionPenaltyLogitsProcessor); frequency_penalty (× count) and presence_penalty
// (× [count > 0]) are subtracted for tokens of the output only (OpenAI's definition).
#pragma once

#include <cstdint>
#include <vector>

namespace microllm::infer {

struct SamplingParams {
  float temperature = 1.0f;             // ≥ 0; 0 = greedy
  int32_t top_k = 0;                    // ≥ 0; keep the k most likely tokens; 0 = off
  float top_p = 1.0f;                   // (0, 1]; smallest set with mass ≥ top_p; 1 = off
  float min_p = 0.0f;                   // [0, 1]; drop p < min_p · p_max; 0 = off
  float repetition_penalty = 1.0f;      // > 0; 1 = off
  float frequency_penalty = 0.0f;       // [-2, 2]; 0 = off
  float presence_penalty = 0.0f;        // [-2, 2]; 0 = off
  uint64_t seed = 0;                    // any value; with the token index keys the draw
  int64_t max_new_tokens = 256;         // ≥ 1 generated tokens at most (the stop token counts)
  std::vector<int32_t> stop_token_ids;  // ≥ 0 each; ending on one is finish reason "stop"
  bool ignore_eos = false;              // do not stop on the model's EOS ids
  int32_t logprobs = -1;                // −1 none, else the top-N (0..20) besides the sampled

  // True when the sampler needs the row's token history (any penalty is on).
  bool uses_history() const {
    return repetition_penalty != 1.0f || frequency_penalty != 0.0f || presence_penalty != 0.0f;
  }
};

inline constexpr int32_t kMaxLogprobs = 20;  // OpenAI's top_logprobs limit

// Throws microllm::Error (op "sampling params") for the first bad value, naming the field,
// the allowed range and the value found (NaN is out of every range). `vocab_size` > 0 also
// checks that every stop token id is below it.
void validate(const SamplingParams& params, int64_t vocab_size = 0);

}  // namespace microllm::infer
