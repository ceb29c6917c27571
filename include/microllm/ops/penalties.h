// Repetition, frequency and presence penalties for inference, applied in place to a batch of
// logits before sampling (ops/sampling.h). Per row b, over its history (prompt ids, then
// generated ids):
//   repetition (transformers' RepetitionPenaltyLogitsProcessor, over prompt + generated):
//     every distinct id once: logit < 0 ? logit · p : logit / p
//   frequency and presence (OpenAI / vLLM, over the generated ids only), then:
//     logit ← logit − frequency · count;  logit ← logit − presence   (count > 0 only)
// Deterministic: one thread per distinct id, after a sort of the row's history.
// Inference only: no autograd, no allocation, no host reads of device data; values are
// validated by the caller (validate_sampling_params in ops/sampling.h).
#pragma once

#include <cstddef>
#include <cstdint>

#include "microllm/core/tensor.h"

namespace microllm::ops {

// Per-row penalties, on the logits' device, each dense of shape (B) F32.
struct PenaltyTensors {
  Tensor repetition;  // (B) F32, > 0; 1 = off
  Tensor frequency;   // (B) F32; 0 = off
  Tensor presence;    // (B) F32; 0 = off
};

// Bytes of the U8 workspace apply_penalties needs for a (B, L) history: a sorted copy of
// each row, padded to a power of two (4·B·bit_ceil(L)).
size_t penalties_workspace_bytes(int64_t batch, int64_t history_len);

// logits (B, V) F32, in place. history (B, L) I32: row b's prompt ids in
// [0, prompt_lens[b]), its generated ids after; entries outside [0, V) (−1 padding) are
// skipped. prompt_lens (B) I32. workspace: U8, ≥ penalties_workspace_bytes(B, L) bytes.
void apply_penalties(const Tensor& logits, const Tensor& history, const Tensor& prompt_lens,
                     const PenaltyTensors& penalties, const Tensor& workspace);

}  // namespace microllm::ops
