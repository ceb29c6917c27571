// Validation of SamplingParams: one Error per bad value, naming the field, its range and
// the value. Comparisons are written so that NaN fails them.
#include "microllm/infer/sampling_params.h"

#include <cmath>

#include "microllm/core/error.h"

namespace microllm::infer {

namespace {
constexpr const char* kOp = "sampling params";
}  // namespace

void validate(const SamplingParams& p, int64_t vocab_size) {
  MICROLLM_CHECK(p.temperature >= 0.0f && std::isfinite(p.temperature), kOp,
                 "temperature must be a finite number >= 0 (0 = greedy), got ", p.temperature);
  MICROLLM_CHECK(p.top_k >= 0, kOp, "top_k must be >= 0 (0 = off), got ", p.top_k);
  MICROLLM_CHECK(p.top_p > 0.0f && p.top_p <= 1.0f, kOp, "top_p must be in (0, 1] (1 = off), got ",
                 p.top_p);
  MICROLLM_CHECK(p.min_p >= 0.0f && p.min_p <= 1.0f, kOp, "min_p must be in [0, 1] (0 = off), got ",
                 p.min_p);
  MICROLLM_CHECK(p.repetition_penalty > 0.0f && std::isfinite(p.repetition_penalty), kOp,
                 "repetition_penalty must be a finite number > 0 (1 = off), got ",
                 p.repetition_penalty);
  MICROLLM_CHECK(p.frequency_penalty >= -2.0f && p.frequency_penalty <= 2.0f, kOp,
                 "frequency_penalty must be in [-2, 2] (0 = off), got ", p.frequency_penalty);
  MICROLLM_CHECK(p.presence_penalty >= -2.0f && p.presence_penalty <= 2.0f, kOp,
                 "presence_penalty must be in [-2, 2] (0 = off), got ", p.presence_penalty);
  MICROLLM_CHECK(p.max_new_tokens >= 1, kOp, "max_new_tokens must be >= 1, got ", p.max_new_tokens);
  MICROLLM_CHECK(p.logprobs >= -1 && p.logprobs <= kMaxLogprobs, kOp,
                 "logprobs must be -1 (none) or in [0, ", kMaxLogprobs, "], got ", p.logprobs);
  for (size_t i = 0; i < p.stop_token_ids.size(); ++i) {
    const int32_t id = p.stop_token_ids[i];
    MICROLLM_CHECK(id >= 0, kOp, "stop_token_ids[", i, "] must be a token id >= 0, got ", id);
    MICROLLM_CHECK(vocab_size <= 0 || id < vocab_size, kOp, "stop_token_ids[", i,
                   "] must be below the vocabulary size ", vocab_size, ", got ", id);
  }
}

}  // namespace microllm::infer
