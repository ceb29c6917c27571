// Sampler: the engine's device-side token choice for one step (INFERENCE.md, "Sampler").
// It owns the buffers and calls the operators (ops/penalties, ops/sampling): the logits are
// widened to F32, penalized over each row's history, filtered and drawn per row with the
// row's own parameters and a counter-based generator keyed by (seed, sample index); the
// chosen token's logprob and the top-N come from the raw model distribution, when a row
// wants logprobs (otherwise their kernel is not launched). All outputs
// live in one device buffer that comes back in one device→host copy, after which the host
// waits once. Mechanism only: which rows sample is the scheduler's business.
//
// enqueue() only launches (the kernels and the asynchronous copy), so a CUDA graph can
// capture it together with the model's step when no row has a penalty history (the
// penalty scratch grows with the history); collect() waits and reads the host copy.
#pragma once

#include <cstdint>
#include <span>

#include "microllm/core/tensor.h"

namespace microllm::infer {

// Per-row inputs, device views into the step's packed buffer (StepInputs).
struct SamplerRows {
  Tensor temperature;         // (B) F32, 0 = greedy
  Tensor top_k;               // (B) I32, 0 = off
  Tensor top_p, min_p;        // (B) F32
  Tensor repetition_penalty;  // (B) F32, 1 = off
  Tensor frequency_penalty;   // (B) F32, 0 = off
  Tensor presence_penalty;    // (B) F32, 0 = off
  Tensor seed;                // (B) I64 (the request's u64 seed bits)
  Tensor sample_index;        // (B) I32 index of the drawn token among the request's outputs
  Tensor prompt_lens;         // (B) I32
  Tensor history;             // (B, L) I32 prompt + outputs, −1 padded; undefined: no penalty
  int64_t top_n = 0;  // top logprobs wanted by any row (≤ 20); −1: no row wants logprobs
};

// Host copies of the step's results, valid until the next sample().
struct SampledRows {
  std::span<const int32_t> ids;         // (B)
  std::span<const float> logprob;       // (B) of ids, raw log-softmax; empty when top_n was −1
  std::span<const int32_t> top_ids;     // (B, top_n) row-major, best first
  std::span<const float> top_logprobs;  // (B, top_n)
  int64_t top_n = 0;
};

class Sampler {
 public:
  Sampler(Device device, int64_t max_seqs, int64_t vocab_size);
  ~Sampler();
  Sampler(const Sampler&) = delete;
  Sampler& operator=(const Sampler&) = delete;

  // logits (B, V) in the model's dtype (not modified). enqueue + collect(B, rows.top_n).
  const SampledRows& sample(const Tensor& logits, const SamplerRows& rows);
  // Launches the step's sampling and the outputs' copy to the host; returns at once.
  void enqueue(const Tensor& logits, const SamplerRows& rows);
  // Waits for the work enqueued last (directly or by a graph replay) and returns its first
  // num_rows rows with top_n logprobs each (top_n as enqueued; −1: the ids alone).
  const SampledRows& collect(int64_t num_rows, int64_t top_n);
  int64_t workspace_bytes() const;
  // Seconds the host spent waiting for the device in the last sample().
  double last_wait_seconds() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace microllm::infer
