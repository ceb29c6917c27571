// FCFS continuous-batching scheduler: decodes first, then prefill chunks, preempting the
// newest running sequence when blocks run out (policy in the header).
#include "microllm/infer/scheduler.h"

#include <algorithm>
#include <limits>

#include "microllm/core/error.h"

namespace microllm::infer {
namespace {

constexpr const char* kOp = "scheduler";

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Tokens of prompt + outputs whose K/V are not yet in the cache.
int64_t remaining(const Sequence& s) { return s.num_tokens() - s.num_cached_tokens; }

}  // namespace

void SchedulerConfig::validate() const {
  MICROLLM_CHECK(max_num_seqs >= 1, kOp, "max_num_seqs must be >= 1, got ", max_num_seqs);
  MICROLLM_CHECK(max_num_batched_tokens >= 1, kOp, "max_num_batched_tokens must be >= 1, got ",
                 max_num_batched_tokens);
  MICROLLM_CHECK(prefill_chunk >= 1, kOp, "prefill_chunk must be >= 1, got ", prefill_chunk);
  MICROLLM_CHECK(block_size >= 1, kOp, "block_size must be >= 1, got ", block_size);
  MICROLLM_CHECK(num_blocks >= 1, kOp, "num_blocks must be >= 1, got ", num_blocks);
  MICROLLM_CHECK(max_model_len >= 1, kOp, "max_model_len must be >= 1, got ", max_model_len);
  MICROLLM_CHECK(int64_t{num_blocks} * block_size <= std::numeric_limits<int32_t>::max(), kOp,
                 "num_blocks * block_size must fit an I32 slot index, got ", num_blocks, " * ",
                 block_size);
}

Scheduler::Scheduler(SchedulerConfig config, std::vector<int32_t> eos_ids)
    : config_((config.validate(), config)),
      eos_ids_(std::move(eos_ids)),
      allocator_(config.num_blocks),
      cache_(allocator_, config.block_size, config.prefix_caching) {}

void Scheduler::add(Sequence seq) {
  const int64_t id = seq.id;
  MICROLLM_CHECK(!live_.contains(id), kOp, "add: sequence ", id, " is already queued or running");
  MICROLLM_CHECK(!seq.prompt_ids.empty(), kOp, "add: sequence ", id, " has an empty prompt");
  for (size_t i = 0; i < seq.prompt_ids.size(); ++i)
    MICROLLM_CHECK(seq.prompt_ids[i] >= 0, kOp, "add: sequence ", id, ": prompt_ids[", i, "] is ",
                   seq.prompt_ids[i], ", expected a token id >= 0");
  MICROLLM_CHECK(seq.output_ids.empty() && seq.block_table.empty() && seq.num_cached_tokens == 0,
                 kOp, "add: sequence ", id,
                 " must be new (no output ids, blocks or cached tokens)");
  validate(seq.params);
  const int64_t prompt = seq.num_prompt_tokens();
  MICROLLM_CHECK(prompt < config_.max_model_len, kOp, "add: sequence ", id, ": the prompt of ",
                 prompt, " tokens leaves no room for a new token in max_model_len ",
                 config_.max_model_len);
  // While running, at most min(prompt + max_new, max_model_len) − 1 tokens have K/V: the
  // last token is sampled, never fed.
  const int64_t total =
      prompt + std::min(seq.params.max_new_tokens, config_.max_model_len - prompt);  // no overflow
  const int64_t blocks = ceil_div(total - 1, config_.block_size);
  MICROLLM_CHECK(blocks <= config_.num_blocks, kOp, "add: sequence ", id,
                 " can never fit: ", prompt, " prompt + ", seq.params.max_new_tokens,
                 " new tokens need ", blocks, " blocks of ", config_.block_size,
                 " tokens, the pool has ", config_.num_blocks);
  seq.status = SequenceStatus::Waiting;
  seq.finish_reason = FinishReason::None;
  seq.stop_token_id = -1;
  auto owned = std::make_unique<Sequence>(std::move(seq));
  waiting_.push_back(owned.get());
  live_.emplace(id, std::move(owned));
}

const Sequence* Scheduler::find(int64_t id) const {
  const auto it = live_.find(id);
  return it == live_.end() ? nullptr : it->second.get();
}

int64_t Scheduler::blocks_needed(const Sequence& s, int64_t n) const {
  const int64_t have = static_cast<int64_t>(s.block_table.size());
  return std::max<int64_t>(0, ceil_div(s.num_cached_tokens + n, config_.block_size) - have);
}

void Scheduler::allocate_blocks(Sequence& s, int64_t n) {
  for (int64_t i = blocks_needed(s, n); i > 0; --i) {
    const std::optional<int32_t> b = cache_.allocate();
    MICROLLM_CHECK(b.has_value(), kOp, "internal: a checked allocation failed");
    s.block_table.push_back(*b);
  }
}

void Scheduler::free_blocks(Sequence& s) {
  for (auto b = s.block_table.rbegin(); b != s.block_table.rend(); ++b) cache_.release(*b);
  s.block_table.clear();
  s.num_cached_tokens = 0;
  s.num_prefill_tokens = 0;
  s.num_shared_blocks = 0;
  s.cache_chain_open = true;
}

void Scheduler::offer_blocks(Sequence& s) {
  const int64_t bs = config_.block_size;
  std::vector<int32_t> ids(static_cast<size_t>(bs));
  while (s.cache_chain_open && (s.num_shared_blocks + 1) * bs <= s.num_prefill_tokens) {
    const int64_t i = s.num_shared_blocks;
    for (int64_t j = 0; j < bs; ++j) ids[static_cast<size_t>(j)] = s.token(i * bs + j);
    const int32_t parent = i == 0 ? -1 : s.block_table[static_cast<size_t>(i - 1)];
    if (cache_.insert(ids, s.block_table[static_cast<size_t>(i)], parent))
      ++s.num_shared_blocks;
    else
      s.cache_chain_open = false;
  }
}

void Scheduler::preempt(size_t index, ScheduledBatch& batch) {
  Sequence* s = running_[index];
  free_blocks(*s);
  s->status = SequenceStatus::Waiting;
  ++s->num_preemptions;
  ++num_preemptions_;
  running_.erase(running_.begin() + static_cast<std::ptrdiff_t>(index));
  waiting_.push_front(s);
  batch.preempted_ids.push_back(s->id);
}

ScheduledBatch Scheduler::schedule() {
  MICROLLM_CHECK(!in_flight_, kOp, "schedule: the batch of step ", step_,
                 " has not been passed to update() yet");
  ScheduledBatch batch;
  batch.step = step_ + 1;
  int64_t budget = config_.max_num_batched_tokens;
  std::vector<const Sequence*> scheduled;
  const auto is_scheduled = [&](const Sequence* s) {
    return std::find(scheduled.begin(), scheduled.end(), s) != scheduled.end();
  };
  const auto emit = [&](Sequence* s, int64_t n) {
    allocate_blocks(*s, n);
    const bool sample = s->num_cached_tokens + n == s->num_tokens();
    batch.seqs.push_back({s, s->id, n, s->num_cached_tokens, sample});
    batch.num_tokens += n;
    budget -= n;
    scheduled.push_back(s);
  };

  // 1. Decodes, oldest first. Every sequence after index i is unscheduled, so the newest
  //    running one is a legal victim; when it is s itself, s waits and nothing is left.
  for (size_t i = 0; i < running_.size() && budget > 0;) {
    Sequence* s = running_[i];
    if (remaining(*s) != 1) {
      ++i;
      continue;
    }
    bool self_preempted = false;
    while (num_free_blocks() < blocks_needed(*s, 1)) {
      self_preempted = running_.back() == s;
      preempt(running_.size() - 1, batch);
      if (self_preempted) break;
    }
    if (self_preempted) break;
    emit(s, 1);
    ++i;
  }

  // 2. Prefill chunks of running sequences, oldest first.
  for (size_t i = 0; i < running_.size() && budget > 0; ++i) {
    Sequence* s = running_[i];
    if (is_scheduled(s)) continue;
    int64_t n = std::min({remaining(*s), config_.prefill_chunk, budget});
    while (num_free_blocks() < blocks_needed(*s, n)) {
      size_t victim = running_.size();
      for (size_t j = running_.size() - 1; j > i; --j)
        if (!is_scheduled(running_[j])) {
          victim = j;
          break;
        }
      if (victim == running_.size()) {  // nothing newer to take: shrink to what fits
        const int64_t slots =
            (static_cast<int64_t>(s->block_table.size()) + num_free_blocks()) * config_.block_size;
        n = std::min(n, slots - s->num_cached_tokens);
        break;
      }
      preempt(victim, batch);
    }
    if (n > 0) emit(s, n);
  }

  // 3. Admission in queue order, after the longest cached prefix (at most (tokens − 2) / BS
  //    blocks: two tokens or more are computed); the first chunk must fit in the free blocks.
  //    A later choice of a prompt waits for the first choice's prompt (it then hits the
  //    cache); requests behind it may pass it.
  if (batch.preempted_ids.empty()) {
    std::vector<int32_t> tokens;
    for (auto it = waiting_.begin();
         it != waiting_.end() && budget > 0 &&
         static_cast<int64_t>(running_.size()) < config_.max_num_seqs;) {
      Sequence* s = *it;
      if (s->after_id >= 0) {  // a later choice of the same prompt waits for the first's
        const Sequence* first = find(s->after_id);
        if (first != nullptr && first->num_cached_tokens < first->num_prompt_tokens()) {
          ++it;  // others may go first
          continue;
        }
        s->after_id = -1;
      }
      std::vector<int32_t> hit;
      if (cache_.enabled() && s->num_tokens() >= 2) {
        tokens.assign(s->prompt_ids.begin(), s->prompt_ids.end());
        tokens.insert(tokens.end(), s->output_ids.begin(), s->output_ids.end());
        hit = cache_.lookup(tokens, (s->num_tokens() - 2) / config_.block_size);
      }
      const int64_t hit_tokens = static_cast<int64_t>(hit.size()) * config_.block_size;
      const int64_t n = std::min({s->num_tokens() - hit_tokens, config_.prefill_chunk, budget});
      const int64_t need =
          ceil_div(hit_tokens + n, config_.block_size) - static_cast<int64_t>(hit.size());
      if (num_free_blocks() - cache_.num_evictable_among(hit) < need) break;
      cache_.acquire(hit);
      s->block_table = hit;
      s->num_cached_tokens = s->num_prefill_tokens = hit_tokens;
      s->num_shared_blocks = static_cast<int64_t>(hit.size());
      if (s->num_preemptions == 0) s->num_prefix_hit_tokens = hit_tokens;
      if (cache_.enabled()) {
        prefix_cache_queries_ += s->num_tokens();
        prefix_cache_hits_ += hit_tokens;
      }
      it = waiting_.erase(it);
      s->status = SequenceStatus::Running;
      running_.push_back(s);
      emit(s, n);
    }
  }

  if (!batch.empty()) {
    step_ = batch.step;
    in_flight_ = true;
  }
  return batch;
}

std::vector<Sequence> Scheduler::update(const ScheduledBatch& batch,
                                        std::span<const int32_t> sampled_ids) {
  if (batch.empty()) return {};
  MICROLLM_CHECK(in_flight_ && batch.step == step_, kOp, "update: expected the batch of step ",
                 step_, (in_flight_ ? "" : " (already updated)"), ", got step ", batch.step);
  MICROLLM_CHECK(sampled_ids.size() == batch.seqs.size(), kOp, "update: expected ",
                 batch.seqs.size(), " sampled ids (one per batch entry), got ", sampled_ids.size());
  for (size_t i = 0; i < batch.seqs.size(); ++i)  // all checks before any change
    MICROLLM_CHECK(!batch.seqs[i].sample || sampled_ids[i] >= 0, kOp, "update: sampled id ",
                   sampled_ids[i], " for sequence ", batch.seqs[i].seq_id, " (row ", i,
                   "), expected a token id >= 0");
  std::vector<int64_t> finished_ids;
  for (size_t i = 0; i < batch.seqs.size(); ++i) {
    const ScheduledSeq& e = batch.seqs[i];
    Sequence& s = *live_.at(e.seq_id);
    s.num_cached_tokens += e.num_new_tokens;
    if (e.num_new_tokens > 1 && s.num_prefill_tokens == e.start_position) {
      s.num_prefill_tokens += e.num_new_tokens;
      offer_blocks(s);
    }
    if (!e.sample) continue;
    s.output_ids.push_back(sampled_ids[i]);
    const FinishReason reason = stop_check(s, eos_ids_, config_.max_model_len);
    if (reason == FinishReason::None) continue;
    s.finish_reason = reason;
    if (reason == FinishReason::Stop) s.stop_token_id = s.output_ids.back();
    finished_ids.push_back(s.id);
  }
  in_flight_ = false;
  std::vector<Sequence> finished;
  for (const int64_t id : finished_ids) finished.push_back(take(id));
  return finished;
}

Sequence Scheduler::take(int64_t id) {
  const auto it = live_.find(id);
  Sequence* s = it->second.get();
  free_blocks(*s);
  running_.erase(std::remove(running_.begin(), running_.end(), s), running_.end());
  waiting_.erase(std::remove(waiting_.begin(), waiting_.end(), s), waiting_.end());
  s->status = SequenceStatus::Finished;
  Sequence out = std::move(*s);
  live_.erase(it);
  return out;
}

std::optional<Sequence> Scheduler::abort(int64_t id) {
  MICROLLM_CHECK(!in_flight_, kOp, "abort: sequence ", id,
                 " cannot be aborted between schedule() and update() (step ", step_, ")");
  if (!live_.contains(id)) return std::nullopt;
  Sequence out = take(id);
  out.finish_reason = FinishReason::Abort;
  return out;
}

}  // namespace microllm::infer
