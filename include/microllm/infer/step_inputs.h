// StepInputs: a ScheduledBatch packed into the host arrays of one step, laid out in ONE
// contiguous byte buffer (so the engine does one H2D copy from one pinned buffer and views
// the device copy at the same offsets). The StepBatch format of docs/inference.md:
//
//   array               shape   type  value
//   token_ids           (N)     I32   token of each new row (0 on padded rows)
//   positions           (N)     I32   its position in its sequence (0 on padded rows)
//   slot_mapping        (N)     I32   block_table[pos / BS] · BS + pos % BS; −1 on padded rows
//   query_starts        (B+1)   I32   sequence b owns rows [query_starts[b], query_starts[b+1])
//   seq_lens            (B)     I32   keys visible to sequence b after the step (start + new)
//   block_tables        (B, M)  I32   physical block of each logical block; −1 past the end
//   last_rows           (B)     I32   row of b's last new token (the LM head reads these)
//   temperature         (B)     F32   per-row sampling parameters (SamplingParams)
//   top_k               (B)     I32
//   top_p, min_p        (B)     F32
//   repetition_penalty, frequency_penalty, presence_penalty (B) F32
//   seed                (B)     U64   request seed
//   sample_index        (B)     I32   index of the token being drawn among the request's
//                                     generated tokens (= outputs so far); with seed it keys
//                                     the counter-based draw, so a token never depends on
//                                     the batch, the chunking or a preemption
//   num_logprobs        (B)     I32   −1 none, else top-N
//   prompt_lens         (B)     I32   prompt length: history[b, :prompt_len] is the prompt
//   history             (B, L)  I32   prompt + outputs so far of rows that sample with a
//                                     penalty, −1 past the end and on every other row
//
// Each array starts on a kStepAlignment-byte boundary of the buffer (cudaMalloc's base
// alignment, so a device view is as aligned as a fresh allocation). N and B may be padded
// up to a graph bucket: padded token rows belong to no sequence (query_starts[B_real..B] all
// equal the real token count), write nothing (slot −1) and are never read; padded sequences
// own no rows, see no keys (seq_len 0, block table −1), read row 0 in last_rows (finite
// logits, ignored) and sample greedily with neutral parameters.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "microllm/infer/scheduler.h"

namespace microllm::infer {

inline constexpr int64_t kStepAlignment = 256;

struct StepDims {
  int64_t num_tokens = 0;   // N rows (padded)
  int64_t num_seqs = 0;     // B rows (padded)
  int64_t max_blocks = 0;   // M block-table width
  int64_t history_len = 0;  // L penalty-history width
};

// Byte offsets of every array in the one buffer, and its size.
struct StepLayout {
  StepDims dims;
  int64_t token_ids = 0, positions = 0, slot_mapping = 0, query_starts = 0, seq_lens = 0,
          block_tables = 0, last_rows = 0;
  int64_t temperature = 0, top_k = 0, top_p = 0, min_p = 0, repetition_penalty = 0,
          frequency_penalty = 0, presence_penalty = 0, seed = 0, sample_index = 0, num_logprobs = 0,
          prompt_lens = 0, history = 0;
  int64_t total_bytes = 0;
};

// Offsets in the order of the table above. Throws microllm::Error (op "step inputs") for a
// dimension < 0 (or N, B < 1).
StepLayout step_layout(const StepDims& dims);

struct PackOptions {
  int64_t padded_num_tokens = 0;  // N; 0: the batch's token count
  int64_t padded_num_seqs = 0;    // B; 0: the batch's sequence count
  int64_t max_blocks = 0;         // M; 0: the widest block table of the batch
  int64_t history_len = -1;       // L; −1: the longest history of a row that needs one (0: none)
};

// The dimensions a batch needs, raised to the options. Throws microllm::Error
// (op "step inputs") for an empty batch or an option below what the batch needs.
StepDims step_dims(const ScheduledBatch& batch, const PackOptions& options = {});

// Typed views of a buffer laid out by `layout`.
struct StepArrays {
  std::span<int32_t> token_ids, positions, slot_mapping, query_starts, seq_lens, block_tables,
      last_rows;
  std::span<float> temperature;
  std::span<int32_t> top_k;
  std::span<float> top_p, min_p, repetition_penalty, frequency_penalty, presence_penalty;
  std::span<uint64_t> seed;
  std::span<int32_t> sample_index, num_logprobs, prompt_lens, history;
};
// Throws unless the buffer holds layout.total_bytes and starts 8-byte aligned.
StepArrays step_arrays(const StepLayout& layout, std::span<std::byte> buffer);

// Writes every array of `layout` for `batch` into `buffer` (a caller's pinned buffer).
// Throws microllm::Error (op "step inputs") when the layout is smaller than the batch needs
// or a sequence lacks the blocks of its new tokens.
void pack_step(const ScheduledBatch& batch, int32_t block_size, const StepLayout& layout,
               std::span<std::byte> buffer);

// The same into an owned host buffer (tests, the CPU path).
class StepInputs {
 public:
  static StepInputs pack(const ScheduledBatch& batch, int32_t block_size,
                         const PackOptions& options = {});
  const StepLayout& layout() const { return layout_; }
  std::span<const std::byte> bytes() const { return {bytes_.data(), bytes_.size()}; }
  StepArrays arrays() { return step_arrays(layout_, {bytes_.data(), bytes_.size()}); }

 private:
  StepLayout layout_;
  std::vector<std::byte> bytes_;  // operator new alignment (≥ 16)
};

}  // namespace microllm::infer
