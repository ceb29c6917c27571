// StepBatch: one flattened, variable-length inference step (INFERENCE.md, "The step, as
// data"). The new tokens of B sequences are concatenated without padding inside a
// sequence; chunked prefill, decode, and (later) padded CUDA-graph buckets share it.
//
// Shape legend: N new tokens in the step, B sequences, M block-table width, NB blocks,
// BS block size.
#pragma once

#include <cstdint>
#include <vector>

#include "microllm/core/tensor.h"

namespace microllm::model {

struct StepBatch {
  Tensor token_ids;     // (N) I32 new tokens; rows past num_tokens are padding
  Tensor positions;     // (N) I32 position of each new token in its sequence
  Tensor slot_mapping;  // (N) I32 block·BS + offset for token n's K/V; −1 writes nothing
  Tensor query_starts;  // (B+1) I32 sequence b's tokens are [query_starts[b], query_starts[b+1])
  Tensor seq_lens;      // (B) I32 keys visible to sequence b after this step
  Tensor block_tables;  // (B, M) I32 physical block of each logical block; −1 past the end
  Tensor last_rows;     // (B) I32 row of each sequence's last new token (the LM head reads these)
  int64_t num_tokens = 0;   // N, host value
  int64_t num_seqs = 0;     // B, host value
  int64_t max_seq_len = 0;  // host bound on every seq_lens[b] (≤ M·BS); 0: M·BS
  // Host value: rows [0, num_decode_rows) are each the one new token of its sequence. On
  // CUDA, in steps small enough for the decode GEMV (decoder_step.cpp), their projections
  // run through the decode GEMV (every other row through the GEMM), so a decode token's
  // values never depend on the prefill rows that share its step (the GEMV's kernel is chosen
  // by the step's sequence count).
  int64_t num_decode_rows = 0;
};

// The paged K and V pools of one layer (DESIGN §7).
struct LayerKv {
  Tensor k;  // (NB, BS, Hkv, D)
  Tensor v;  // (NB, BS, Hkv, D)
};

}  // namespace microllm::model
