// Scheduler: first-come-first-served continuous batching over a paged KV cache, host only.
//
// One engine step is schedule() → pack → forward → sample → update(). schedule() picks the
// tokens of this step under the knobs of SchedulerConfig and allocates the blocks they
// need, in this order:
//   1. decodes: every running sequence with one token left to compute (its last sampled
//      one), oldest first. Out of blocks ⇒ the newest running sequence is preempted (blocks
//      freed, sent to the front of the waiting queue, recomputed later from prompt + outputs
//      so far); when that is the sequence itself, it waits too. Never an error, never a
//      wrong token.
//   2. prefill chunks of running sequences that still have more than one token to compute
//      (prompts longer than prefill_chunk, preempted sequences being recomputed), oldest
//      first: at most prefill_chunk tokens each; out of blocks ⇒ newer sequences not in this
//      step are preempted, then the chunk shrinks to what fits.
//   3. admission of waiting sequences in queue order while running < max_num_seqs: the
//      first chunk must fit in the free blocks, or admission stops (no request overtakes
//      an older one, except one that waits for another choice of its prompt: Sequence::
//      after_id). No admission in a step that preempted (it would thrash).
// All under the budget of max_num_batched_tokens new tokens per step. The oldest running
// sequence always progresses and every request fits the pool alone (checked by add()), so
// every request finishes. A chunk's last token is sampled when it completes the known
// tokens (prompt + outputs): the logits there predict the next token.
// update() appends the sampled ids, runs stop_check, offers the sequences' newly full
// prefill blocks to the prefix cache, frees the blocks of finished sequences and hands
// them back.
//
// Prefix caching (config.prefix_caching): at admission a sequence takes the cached blocks
// of the longest cached prefix of its tokens (PrefixCache), at most (tokens − 2) / BS
// blocks, so that at least two tokens are computed: the rows after a hit are prefill rows,
// as in a whole prefill, and the sampled token is the one a prefill without the cache
// gives, bit for bit. Only blocks whose every token came from a hit or from a prefill row
// of ≥ 2 tokens are offered to the cache (a one-token row may take another kernel, e.g. the
// decode GEMV on CUDA). Blocks only the cache holds count as free for every decision above
// and are evicted least recently released first. Reference: nano-vllm scheduler.py, vLLM v1
// scheduler (read, not copied).
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "microllm/infer/block_allocator.h"
#include "microllm/infer/prefix_cache.h"
#include "microllm/infer/sequence.h"

namespace microllm::infer {

struct SchedulerConfig {
  int64_t max_num_seqs = 64;              // running sequences at most (B of a step ≤ this)
  int64_t max_num_batched_tokens = 2048;  // new tokens per step (N ≤ this)
  int64_t prefill_chunk = 512;            // prompt tokens of one sequence per step
  int32_t block_size = 16;                // BS token slots per block
  int32_t num_blocks = 0;                 // NB blocks in the pool (from the memory budget)
  int64_t max_model_len = 0;              // context: prompt + outputs ≤ this
  bool prefix_caching = false;            // reuse the cached blocks of a common prefix
  // Throws microllm::Error (op "scheduler") for a value < 1 or NB·BS ≥ 2^31 (slots are I32).
  void validate() const;
};

// One sequence's share of a step: tokens [start_position, start_position + num_new_tokens)
// of prompt + outputs, whose K/V go to the blocks of seq->block_table.
struct ScheduledSeq {
  const Sequence* seq = nullptr;  // valid until the next update() or abort()
  int64_t seq_id = 0;
  int64_t num_new_tokens = 0;
  int64_t start_position = 0;  // = seq->num_cached_tokens before the step
  bool sample = false;         // the logits of the last new token give the next output id
};

struct ScheduledBatch {
  uint64_t step = 0;                   // pairs update() with its schedule()
  std::vector<ScheduledSeq> seqs;      // (B) decodes first, then prefill chunks
  int64_t num_tokens = 0;              // N = Σ num_new_tokens
  std::vector<int64_t> preempted_ids;  // sequences preempted while scheduling this step
  bool empty() const { return seqs.empty(); }
  int64_t num_seqs() const { return static_cast<int64_t>(seqs.size()); }
  bool is_decode_only() const { return num_tokens == num_seqs(); }  // one token each
};

class Scheduler {
 public:
  // `eos_ids`: the model's EOS ids (merge_eos_token_ids). Validates the config.
  Scheduler(SchedulerConfig config, std::vector<int32_t> eos_ids);

  // Queues a new request (status Waiting). Throws microllm::Error (op "scheduler") for an id
  // already live, an empty prompt, a negative token id, a prompt with no room left in
  // max_model_len, more blocks than the pool for prompt + max_new_tokens, output ids or
  // blocks already present, or invalid params.
  void add(Sequence seq);
  // Removes a live request, frees its blocks and returns it (reason Abort, status Finished);
  // nullopt for an id that is not live (already finished, never added). Not between
  // schedule() and update() (an Error).
  std::optional<Sequence> abort(int64_t id);

  // This step's tokens, blocks allocated. An empty batch starts no step (no update needed).
  ScheduledBatch schedule();
  // After the step: `sampled_ids` has one id per batch entry (rows whose `sample` is false
  // are ignored). Returns the sequences that finished (reason Stop or Length), blocks freed.
  std::vector<Sequence> update(const ScheduledBatch& batch, std::span<const int32_t> sampled_ids);

  int64_t num_waiting() const { return static_cast<int64_t>(waiting_.size()); }
  int64_t num_running() const { return static_cast<int64_t>(running_.size()); }
  bool has_unfinished() const { return !live_.empty(); }
  int64_t num_preemptions() const { return num_preemptions_; }  // since construction
  // Blocks allocate can hand out (free + only cached) and the rest (held by sequences).
  int64_t num_free_blocks() const { return cache_.num_available(); }
  int64_t num_used_blocks() const { return config_.num_blocks - num_free_blocks(); }
  // Tokens looked up in the prefix cache at admissions, and those found (vLLM's counters).
  int64_t prefix_cache_queries() const { return prefix_cache_queries_; }
  int64_t prefix_cache_hits() const { return prefix_cache_hits_; }
  const Sequence* find(int64_t id) const;  // nullptr when not live
  const BlockAllocator& allocator() const { return allocator_; }
  const PrefixCache& prefix_cache() const { return cache_; }
  const SchedulerConfig& config() const { return config_; }
  std::span<const int32_t> eos_ids() const { return eos_ids_; }

 private:
  int64_t blocks_needed(const Sequence& seq, int64_t num_new_tokens) const;
  void allocate_blocks(Sequence& seq, int64_t num_new_tokens);
  void free_blocks(Sequence& seq);
  void offer_blocks(Sequence& seq);  // newly full prefill blocks → the prefix cache
  void preempt(size_t running_index, ScheduledBatch& batch);
  Sequence take(int64_t id);  // removes from live_, running_ and waiting_

  SchedulerConfig config_;
  std::vector<int32_t> eos_ids_;
  BlockAllocator allocator_;
  PrefixCache cache_;  // every block is taken and given back through it
  std::map<int64_t, std::unique_ptr<Sequence>> live_;  // every unfinished sequence, by id
  std::deque<Sequence*> waiting_;                      // front is admitted next
  std::vector<Sequence*> running_;                     // in admission order (back = newest)
  uint64_t step_ = 0;
  bool in_flight_ = false;  // schedule() returned a non-empty batch not yet updated
  int64_t num_preemptions_ = 0;
  int64_t prefix_cache_queries_ = 0;
  int64_t prefix_cache_hits_ = 0;
};

}  // namespace microllm::infer
