// Sampling for inference: the distribution a request draws its next token from
// (temperature, then top-k, top-p and min-p, in transformers' order; temperature 0 is greedy
// and bypasses the rest), the seeded draw, and the log-probabilities responses report.
// Repetition / frequency / presence penalties come before, from ops/penalties.h.
// docs/sampling.md gives each step's exact semantics, the tie rules and the RNG keying.
//
// Inference only: no autograd, no allocation inside the ops (outputs and workspace are the
// caller's), no reads of device data on the host, one launch for the whole batch. Row b of
// every (B) parameter tensor belongs to request b, so mixed requests share one launch (and
// one CUDA graph). Parameter values are validated by the caller, on the host, with
// validate_sampling_params; the ops check shapes, dtypes and devices only.
#pragma once

#include <cstddef>
#include <cstdint>

#include "microllm/core/tensor.h"

namespace microllm::ops {

inline constexpr int64_t kMaxTopLogprobs = 20;                  // OpenAI's top_logprobs limit
inline constexpr int64_t kMaxSamplingVocab = int64_t{1} << 20;  // masses are exact up to here
// Rows with a temperature below this (0 included) are greedy: argmax, lowest id on ties.
inline constexpr float kGreedyTemperature = 1e-5f;

// One request's sampling parameters as plain host values, with their "off" defaults.
struct SamplingValues {
  float temperature = 1.0f;         // ≥ 0 and finite; < kGreedyTemperature = greedy
  int32_t top_k = 0;                // ≥ 0; 0 (or ≥ V) = off
  float top_p = 1.0f;               // (0, 1]; 1 = off
  float min_p = 0.0f;               // [0, 1]; 0 = off
  float repetition_penalty = 1.0f;  // > 0 and finite; 1 = off
  float frequency_penalty = 0.0f;   // finite; 0 = off
  float presence_penalty = 0.0f;    // finite; 0 = off
  int32_t top_logprobs = 0;         // [0, kMaxTopLogprobs]
};

// Throws an Error (op "sampling_params") naming the first value out of its range.
void validate_sampling_params(const SamplingValues& values);

// Per-row parameters, on the logits' device, each dense of shape (B).
struct SamplingTensors {
  Tensor temperature;  // (B) F32
  Tensor top_k;        // (B) I32
  Tensor top_p;        // (B) F32
  Tensor min_p;        // (B) F32
  Tensor seed;         // (B) I64: the request's seed, its 64 bits the generator's key
  Tensor position;     // (B) I32 or I64: token index within the request, the RNG counter
};

// Bytes of the U8 workspace sample / sampling_distribution need for (B, V) logits on
// `device`: 16·B·V on the CPU, for its sort; 260·B on CUDA, where a greedy row's argmax is
// split over blocks that meet in the workspace. A CUDA workspace must be zero before its first
// use (Tensor::zeros); every call leaves it ready for the next.
size_t sample_workspace_bytes(int64_t batch, int64_t vocab, Device device);

// A workspace of sample_workspace_bytes(batch, vocab, device) bytes as the ops take it: U8,
// zeroed on CUDA, uninitialized on the CPU; undefined when that size is 0.
Tensor sample_workspace(int64_t batch, int64_t vocab, Device device);

// out_ids (B) I32 ← one token per row drawn from the filtered distribution of
// logits (B, V) F32 or BF16 (penalties already applied), V ≤ kMaxSamplingVocab.
// The draw depends on the row's logits, parameters, seed and position only.
// workspace: U8, at least sample_workspace_bytes(B, V, device) bytes (undefined when 0).
void sample(const Tensor& logits, const SamplingTensors& params, const Tensor& out_ids,
            const Tensor& workspace);

// The distribution `sample` draws from, for tests and tools: out_scores (B, V) F32 holds
// logit / temperature for kept tokens and −inf for removed ones (transformers' processed
// scores), out_probs (B, V) F32 the kept tokens' renormalized probabilities (0 elsewhere).
// Greedy rows give the argmax alone. params.seed and params.position are not read.
void sampling_distribution(const Tensor& logits, const SamplingTensors& params,
                           const Tensor& out_scores, const Tensor& out_probs,
                           const Tensor& workspace);

// Log-probabilities under log_softmax(logits) of logits (B, V) F32 or BF16: out_logprobs
// (B) F32 at ids (B) I32 (ids in [0, V); others give NaN), and the N highest in top_ids
// (B, N) I32 / top_logprobs (B, N) F32, in decreasing order, ties by lower id
// (N ≤ kMaxTopLogprobs and N ≤ V; N = 0 allows undefined top tensors). The engine passes
// the model's raw logits — before penalties and temperature — as vLLM reports by default.
void logprobs(const Tensor& logits, const Tensor& ids, const Tensor& out_logprobs,
              const Tensor& top_ids, const Tensor& top_logprobs);

// out (B, V) ← the counter-based draws of (seeds[b], positions[b], lane v): I64 out gets
// counter_u64's bits, F32 out counter_uniform_f32, F64 out counter_uniform_f64
// (core/counter_rng.h). seeds (B) I64, positions (B) I32 or I64, all on one device.
void counter_random(const Tensor& seeds, const Tensor& positions, const Tensor& out);

}  // namespace microllm::ops
