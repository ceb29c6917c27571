// Sequence: the state of one request inside the engine (ids only: the engine knows no
// text), and stop_check, the id-level stopping rules.
//
// The tokens of a sequence are prompt_ids then output_ids; positions count from 0 over
// both. num_cached_tokens of them have their K/V in the blocks of block_table (logical
// block i = tokens [i·BS, (i+1)·BS)). A decoding sequence has every token cached but the
// last sampled one; a preempted sequence has none cached and is recomputed from prompt +
// outputs so far (its outputs are kept: no token is sampled twice).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "microllm/infer/sampling_params.h"

namespace microllm::infer {

enum class SequenceStatus { Waiting, Running, Finished };

enum class FinishReason {
  None,    // not finished
  Stop,    // an EOS id or one of params.stop_token_ids was generated
  Length,  // max_new_tokens generated, or the context (max_model_len) is full
  Abort,   // aborted by the caller (client gone, request cancelled)
};

// "stop", "length", "abort" (OpenAI's finish_reason spelling); "" for None.
const char* to_string(FinishReason reason);

struct Sequence {
  int64_t id = 0;
  std::vector<int32_t> prompt_ids;  // (T_prompt)
  std::vector<int32_t> output_ids;  // (T_out) generated so far; the stopping token included
  SamplingParams params;
  SequenceStatus status = SequenceStatus::Waiting;
  std::vector<int32_t> block_table;  // physical block of each logical block
  int64_t num_cached_tokens = 0;     // tokens whose K/V are in the cache
  FinishReason finish_reason = FinishReason::None;
  int32_t stop_token_id = -1;   // the EOS or stop id that ended it (reason Stop); else −1
  int64_t num_preemptions = 0;  // times its blocks were taken back for recompute
  // Admitted only once sequence `after_id` (same prompt: n > 1 choices) has its prompt's K/V
  // or has ended, so that the prefix cache serves this one its full prompt blocks; −1: none.
  int64_t after_id = -1;
  // Prefix-cache bookkeeping (Scheduler): the leading tokens whose K/V came from a cache
  // hit or from prefill rows (chunks of ≥ 2 tokens, whose bits equal a whole prefill's);
  // the leading blocks of block_table that are the cache's blocks of their prefix; whether
  // later blocks may still be offered to the cache; tokens found cached at admission.
  int64_t num_prefill_tokens = 0;
  int64_t num_shared_blocks = 0;
  bool cache_chain_open = true;
  int64_t num_prefix_hit_tokens = 0;

  int64_t num_prompt_tokens() const { return static_cast<int64_t>(prompt_ids.size()); }
  int64_t num_output_tokens() const { return static_cast<int64_t>(output_ids.size()); }
  int64_t num_tokens() const { return num_prompt_tokens() + num_output_tokens(); }
  // Token at position i of prompt + output (unchecked beyond an assert-level bound).
  int32_t token(int64_t i) const {
    return i < num_prompt_tokens() ? prompt_ids[static_cast<size_t>(i)]
                                   : output_ids[static_cast<size_t>(i - num_prompt_tokens())];
  }
  bool is_finished() const { return status == SequenceStatus::Finished; }
};

// Whether the sequence must stop after its last output token, checked in this order:
//   1. the last output id is an EOS id (unless params.ignore_eos) → Stop;
//   2. it is one of params.stop_token_ids → Stop (even with ignore_eos);
//   3. num_output_tokens() ≥ params.max_new_tokens → Length;
//   4. num_tokens() ≥ max_model_len (no room for another token) → Length;
// else None. With no output yet only 4 can apply. The stopping token stays in output_ids,
// as transformers' generate() returns the EOS; the caller reads it as output_ids.back().
FinishReason stop_check(const Sequence& seq, std::span<const int32_t> eos_ids,
                        int64_t max_model_len);

}  // namespace microllm::infer
