// Scheduler: chunked prefill, decode-first ordering, budgets, sequences joining and leaving,
// FCFS admission, preemption and recompute, abort, stop rules, error paths; then a
// randomized run against the paged fake model (tests/infer/paged_fake_model.h) checking
// every step's invariants and every finished sequence against the sequence run alone.
#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <vector>

#include "core/expect_error.h"
#include "infer/paged_fake_model.h"
#include "microllm/infer/scheduler.h"
#include "microllm/infer/step_inputs.h"

namespace microllm::testing {
namespace {

using infer::FinishReason;
using infer::ScheduledBatch;
using infer::Scheduler;
using infer::SchedulerConfig;
using infer::Sequence;
using Ids = std::vector<int32_t>;

SchedulerConfig config(int32_t num_blocks, int32_t block_size, int64_t budget = 1000,
                       int64_t chunk = 1000, int64_t max_seqs = 8, int64_t max_len = 1000) {
  SchedulerConfig c;
  c.max_num_seqs = max_seqs;
  c.max_num_batched_tokens = budget;
  c.prefill_chunk = chunk;
  c.block_size = block_size;
  c.num_blocks = num_blocks;
  c.max_model_len = max_len;
  return c;
}

// Prompt id·100 + i, i = 0..len−1 (distinct per sequence, never an EOS of the tests).
Sequence request(int64_t id, int64_t prompt_len, int64_t max_new) {
  Sequence s;
  s.id = id;
  for (int64_t i = 0; i < prompt_len; ++i)
    s.prompt_ids.push_back(static_cast<int32_t>(id * 100 + i));
  s.params.max_new_tokens = max_new;
  return s;
}

// (id, new tokens, start, sample) of each entry, for compact expectations.
struct Entry {
  int64_t id, n, start;
  bool sample;
  bool operator==(const Entry&) const = default;
};
std::ostream& operator<<(std::ostream& o, const Entry& e) {
  return o << "{" << e.id << ", " << e.n << ", " << e.start << ", " << e.sample << "}";
}
std::vector<Entry> entries(const ScheduledBatch& b) {
  std::vector<Entry> out;
  for (const auto& e : b.seqs)
    out.push_back({e.seq_id, e.num_new_tokens, e.start_position, e.sample});
  return out;
}

// One engine step with the fake model; returns the finished sequences.
std::vector<Sequence> step(Scheduler& s, PagedFakeModel& model, ScheduledBatch& batch) {
  batch = s.schedule();
  if (batch.empty()) return {};
  infer::StepInputs in = infer::StepInputs::pack(batch, s.config().block_size);
  const Ids ids = model.step(batch, in);
  for (size_t b = 0; b < batch.seqs.size(); ++b)
    if (batch.seqs[b].sample)
      EXPECT_EQ(ids[b], fake_next_token(all_tokens(*batch.seqs[b].seq))) << "row " << b;
  return s.update(batch, ids);
}

TEST(Scheduler, ChunkedPrefillOverSeveralStepsWithPositionsAndSlots) {
  Scheduler s(config(8, 4, 1000, /*chunk=*/4), {});
  s.add(request(1, 10, 3));
  PagedFakeModel model(8, 4);
  ScheduledBatch b;
  // Step 1: prompt tokens [0, 4), one block (0), not sampled.
  step(s, model, b);
  EXPECT_EQ(entries(b), (std::vector<Entry>{{1, 4, 0, false}}));
  EXPECT_EQ(s.find(1)->block_table, (Ids{0}));
  EXPECT_EQ(s.find(1)->num_cached_tokens, 4);
  EXPECT_TRUE(s.find(1)->output_ids.empty());
  // Step 2: [4, 8) into block 1 (slots 4..7).
  b = s.schedule();
  EXPECT_EQ(entries(b), (std::vector<Entry>{{1, 4, 4, false}}));
  {
    infer::StepInputs in = infer::StepInputs::pack(b, 4);
    const infer::StepArrays a = in.arrays();
    EXPECT_EQ(Ids(a.positions.begin(), a.positions.end()), (Ids{4, 5, 6, 7}));
    EXPECT_EQ(Ids(a.slot_mapping.begin(), a.slot_mapping.end()), (Ids{4, 5, 6, 7}));
    EXPECT_EQ(Ids(a.token_ids.begin(), a.token_ids.end()), (Ids{104, 105, 106, 107}));
    s.update(b, model.step(b, in));
  }
  // Step 3: the last 2 prompt tokens [8, 10) into block 2 (slots 8, 9), sampled.
  step(s, model, b);
  EXPECT_EQ(entries(b), (std::vector<Entry>{{1, 2, 8, true}}));
  EXPECT_EQ(s.find(1)->block_table, (Ids{0, 1, 2}));
  ASSERT_EQ(s.find(1)->output_ids.size(), 1u);
  // Step 4: decode of that token at position 10 (block 2, offset 2 = slot 10).
  b = s.schedule();
  EXPECT_EQ(entries(b), (std::vector<Entry>{{1, 1, 10, true}}));
  infer::StepInputs in = infer::StepInputs::pack(b, 4);
  EXPECT_EQ(in.arrays().slot_mapping[0], 10);
  EXPECT_EQ(in.arrays().token_ids[0], s.find(1)->output_ids[0]);
  s.update(b, model.step(b, in));
  // Step 5: position 11, the last of block 2; max_new_tokens 3 reached.
  const std::vector<Sequence> done = step(s, model, b);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].finish_reason, FinishReason::Length);
  EXPECT_EQ(done[0].output_ids, fake_reference_outputs(request(1, 10, 3), {}, 1000));
  EXPECT_EQ(s.allocator().num_used(), 0);
  EXPECT_FALSE(s.has_unfinished());
}

TEST(Scheduler, DecodesComeFirstThenPrefillUnderTheTokenBudget) {
  Scheduler s(config(32, 4, /*budget=*/4, /*chunk=*/8), {});
  PagedFakeModel model(32, 4);
  s.add(request(1, 2, 5));
  s.add(request(2, 2, 5));
  ScheduledBatch b;
  std::map<int64_t, Sequence> done;
  const auto run = [&] {
    for (Sequence& d : step(s, model, b)) done.emplace(d.id, std::move(d));
  };
  run();  // both prompts (2 + 2 tokens = the budget)
  EXPECT_EQ(entries(b), (std::vector<Entry>{{1, 2, 0, true}, {2, 2, 0, true}}));
  s.add(request(3, 6, 5));
  run();
  // Two decodes first, then the prefill gets what is left of the budget: 4 − 2 = 2.
  EXPECT_EQ(entries(b), (std::vector<Entry>{{1, 1, 2, true}, {2, 1, 2, true}, {3, 2, 0, false}}));
  EXPECT_EQ(b.num_tokens, 4);
  EXPECT_FALSE(b.is_decode_only());
  run();
  EXPECT_EQ(entries(b), (std::vector<Entry>{{1, 1, 3, true}, {2, 1, 3, true}, {3, 2, 2, false}}));
  run();
  EXPECT_EQ(entries(b), (std::vector<Entry>{{1, 1, 4, true}, {2, 1, 4, true}, {3, 2, 4, true}}));
  run();  // 1 and 2 reach 5 tokens and leave
  EXPECT_EQ(entries(b), (std::vector<Entry>{{1, 1, 5, true}, {2, 1, 5, true}, {3, 1, 6, true}}));
  EXPECT_TRUE(b.is_decode_only());
  while (s.has_unfinished()) run();
  for (int64_t id : {1, 2, 3})
    EXPECT_EQ(done.at(id).output_ids,
              fake_reference_outputs(request(id, id == 3 ? 6 : 2, 5), {}, 1000));
  EXPECT_EQ(s.allocator().num_used(), 0);
}

TEST(Scheduler, SequencesJoinWhenSlotsFreeAndLeaveWhenDone) {
  Scheduler s(config(32, 4, 1000, 1000, /*max_seqs=*/2), {});
  PagedFakeModel model(32, 4);
  s.add(request(1, 3, 1));  // finishes at its first token
  s.add(request(2, 3, 3));
  s.add(request(3, 2, 2));
  ScheduledBatch b;
  std::vector<Sequence> done = step(s, model, b);
  EXPECT_EQ(entries(b), (std::vector<Entry>{{1, 3, 0, true}, {2, 3, 0, true}}));
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].id, 1);
  EXPECT_EQ(done[0].finish_reason, FinishReason::Length);
  EXPECT_EQ(done[0].status, infer::SequenceStatus::Finished);
  EXPECT_TRUE(done[0].block_table.empty());
  EXPECT_EQ(s.num_waiting(), 1);
  done = step(s, model, b);  // 1 left: 3 joins next to 2's decode
  EXPECT_EQ(entries(b), (std::vector<Entry>{{2, 1, 3, true}, {3, 2, 0, true}}));
  EXPECT_TRUE(done.empty());
  done = step(s, model, b);
  EXPECT_EQ(entries(b), (std::vector<Entry>{{2, 1, 4, true}, {3, 1, 2, true}}));
  ASSERT_EQ(done.size(), 2u);  // 2 reached 3 tokens, 3 reached 2
  EXPECT_EQ(s.num_running(), 0);
  EXPECT_EQ(s.allocator().num_used(), 0);
  EXPECT_TRUE(s.schedule().empty());
}

TEST(Scheduler, AdmissionIsFirstComeFirstServed) {
  // 4 blocks of 4. A takes 2; B's 12-token prompt needs 3 and waits; C (1 block) arrived
  // after B and must not overtake it.
  Scheduler s(config(4, 4), {});
  PagedFakeModel model(4, 4);
  s.add(request(1, 8, 4));
  s.add(request(2, 12, 1));
  s.add(request(3, 2, 1));
  ScheduledBatch b;
  step(s, model, b);
  EXPECT_EQ(entries(b), (std::vector<Entry>{{1, 8, 0, true}}));
  step(s, model, b);  // A's decode takes a third block; one is left
  EXPECT_EQ(entries(b), (std::vector<Entry>{{1, 1, 8, true}}));
  EXPECT_EQ(s.num_waiting(), 2);
  while (s.find(1) != nullptr) step(s, model, b);
  step(s, model, b);  // A gone: B (3 blocks) and C (1 block) fit together
  EXPECT_EQ(entries(b), (std::vector<Entry>{{2, 12, 0, true}, {3, 2, 0, true}}));
  EXPECT_FALSE(s.has_unfinished());
  EXPECT_EQ(s.allocator().num_used(), 0);
}

TEST(Scheduler, OutOfBlocksPreemptsTheNewestWhichResumesAndFinishes) {
  // 4 blocks of 2 slots; A and B: 3-token prompts, 4 new tokens (3 blocks each alone).
  Scheduler s(config(4, 2), {});
  PagedFakeModel model(4, 2);
  s.add(request(1, 3, 4));
  s.add(request(2, 3, 4));
  ScheduledBatch b;
  std::map<int64_t, Sequence> done;
  const auto run = [&] {
    for (Sequence& d : step(s, model, b)) done.emplace(d.id, std::move(d));
  };
  run();  // both prompts: A blocks [0, 1], B [2, 3]; the pool is full
  EXPECT_EQ(s.find(1)->block_table, (Ids{0, 1}));
  EXPECT_EQ(s.find(2)->block_table, (Ids{2, 3}));
  run();  // positions 3 still fit in the second blocks
  EXPECT_EQ(entries(b), (std::vector<Entry>{{1, 1, 3, true}, {2, 1, 3, true}}));
  // Position 4 needs a third block: B (newest) is preempted, its blocks go back last to
  // first, and A gets the one given back last (LIFO): B's first.
  run();
  EXPECT_EQ(entries(b), (std::vector<Entry>{{1, 1, 4, true}}));
  EXPECT_EQ(b.preempted_ids, (std::vector<int64_t>{2}));
  EXPECT_EQ(s.find(1)->block_table, (Ids{0, 1, 2}));
  EXPECT_EQ(s.find(2)->status, infer::SequenceStatus::Waiting);
  EXPECT_TRUE(s.find(2)->block_table.empty());
  EXPECT_EQ(s.find(2)->output_ids.size(), 2u);  // kept: recomputed, not resampled
  EXPECT_EQ(s.num_preemptions(), 1);
  run();  // A's last token; B's 5 tokens need 3 blocks, 1 is free: B waits
  EXPECT_EQ(entries(b), (std::vector<Entry>{{1, 1, 5, true}}));
  ASSERT_TRUE(done.contains(1));
  run();  // B recomputes prompt + its 2 outputs and samples its third token
  EXPECT_EQ(entries(b), (std::vector<Entry>{{2, 5, 0, true}}));
  run();
  EXPECT_EQ(entries(b), (std::vector<Entry>{{2, 1, 5, true}}));
  ASSERT_TRUE(done.contains(2));
  EXPECT_EQ(done.at(2).num_preemptions, 1);
  for (int64_t id : {1, 2})
    EXPECT_EQ(done.at(id).output_ids, fake_reference_outputs(request(id, 3, 4), {}, 1000));
  EXPECT_EQ(s.allocator().num_used(), 0);
  EXPECT_EQ(s.num_running() + s.num_waiting(), 0);
}

TEST(Scheduler, ADecodeThatIsItselfTheNewestWaits) {
  // 3 blocks of 2. A (3-token prompt) holds 2, B (2-token prompt) 1. At the next step A's
  // position 3 fits its second block, B's position 2 needs a new one: B is the newest, so
  // B itself waits (A is older and keeps running).
  Scheduler s(config(3, 2), {});
  PagedFakeModel model(3, 2);
  s.add(request(1, 3, 2));
  s.add(request(2, 2, 2));
  ScheduledBatch b;
  std::map<int64_t, Sequence> done;
  const auto run = [&] {
    for (Sequence& d : step(s, model, b)) done.emplace(d.id, std::move(d));
  };
  run();
  EXPECT_EQ(entries(b), (std::vector<Entry>{{1, 3, 0, true}, {2, 2, 0, true}}));
  run();
  EXPECT_EQ(entries(b), (std::vector<Entry>{{1, 1, 3, true}}));
  EXPECT_EQ(b.preempted_ids, (std::vector<int64_t>{2}));
  ASSERT_TRUE(done.contains(1));  // 2 tokens: done, its blocks are free again
  run();                          // B recomputes its prompt + 1 output (3 tokens, 2 blocks)
  EXPECT_EQ(entries(b), (std::vector<Entry>{{2, 3, 0, true}}));
  EXPECT_FALSE(s.has_unfinished());
  EXPECT_EQ(done.at(1).output_ids, fake_reference_outputs(request(1, 3, 2), {}, 1000));
  EXPECT_EQ(done.at(2).output_ids, fake_reference_outputs(request(2, 2, 2), {}, 1000));
  EXPECT_EQ(s.allocator().num_used(), 0);
}

TEST(Scheduler, AbortFreesBlocksWhereverTheSequenceIs) {
  Scheduler s(config(8, 4, 1000, 1000, 1), {});
  PagedFakeModel model(8, 4);
  s.add(request(1, 9, 5));
  s.add(request(2, 3, 5));  // waits: max_num_seqs 1
  ScheduledBatch b;
  step(s, model, b);
  EXPECT_EQ(s.allocator().num_used(), 3);
  std::optional<Sequence> a = s.abort(1);
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a->finish_reason, FinishReason::Abort);
  EXPECT_EQ(a->output_ids.size(), 1u);
  EXPECT_EQ(s.allocator().num_used(), 0);
  EXPECT_EQ(s.abort(1), std::nullopt);   // no longer live
  EXPECT_EQ(s.abort(77), std::nullopt);  // never added
  ASSERT_TRUE(s.abort(2).has_value());   // a waiting sequence
  EXPECT_FALSE(s.has_unfinished());
  EXPECT_TRUE(s.schedule().empty());
  // Not between schedule() and update().
  s.add(request(3, 2, 2));
  b = s.schedule();
  EXPECT_TRUE(throws_error([&] { s.abort(3); }, "scheduler", {"abort", "between schedule"}));
  s.update(b, Ids{5});
  EXPECT_TRUE(s.abort(3).has_value());
  EXPECT_EQ(s.allocator().num_used(), 0);
}

TEST(Scheduler, StopsOnEosStopIdsMaxTokensAndContext) {
  Scheduler s(config(16, 4, 1000, 1000, 8, /*max_len=*/8), {2, 9});
  Sequence eos = request(1, 3, 10);
  Sequence ignore = request(2, 3, 10);
  ignore.params.ignore_eos = true;
  ignore.params.stop_token_ids = {7};
  s.add(std::move(eos));
  s.add(std::move(ignore));
  s.add(request(3, 5, 10));  // context 8: 3 new tokens at most
  ScheduledBatch b = s.schedule();
  EXPECT_TRUE(s.update(b, Ids{5, 9, 6}).empty());  // 9 is an EOS, ignored by 2
  b = s.schedule();
  std::vector<Sequence> done = s.update(b, Ids{9, 2, 6});
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].id, 1);
  EXPECT_EQ(done[0].finish_reason, FinishReason::Stop);
  EXPECT_EQ(done[0].stop_token_id, 9);
  EXPECT_EQ(done[0].output_ids, (Ids{5, 9}));  // the EOS stays in the output
  b = s.schedule();
  done = s.update(b, Ids{7, 6});
  ASSERT_EQ(done.size(), 2u);
  EXPECT_EQ(done[0].id, 2);
  EXPECT_EQ(done[0].finish_reason, FinishReason::Stop);  // a stop id, despite ignore_eos
  EXPECT_EQ(done[0].stop_token_id, 7);
  EXPECT_EQ(done[1].id, 3);
  EXPECT_EQ(done[1].finish_reason, FinishReason::Length);  // 5 + 3 = max_model_len
  EXPECT_EQ(done[1].stop_token_id, -1);
  EXPECT_EQ(done[1].output_ids.size(), 3u);
  EXPECT_EQ(s.allocator().num_used(), 0);
}

TEST(StopCheck, RulesInOrder) {
  Sequence s = request(1, 4, 3);
  const Ids eos = {2};
  EXPECT_EQ(infer::stop_check(s, eos, 100), FinishReason::None);  // no output yet
  EXPECT_EQ(infer::stop_check(s, eos, 4), FinishReason::Length);  // the prompt fills the context
  s.output_ids = {5};
  EXPECT_EQ(infer::stop_check(s, eos, 100), FinishReason::None);
  s.output_ids = {5, 2};
  EXPECT_EQ(infer::stop_check(s, eos, 100), FinishReason::Stop);
  s.params.ignore_eos = true;
  EXPECT_EQ(infer::stop_check(s, eos, 100), FinishReason::None);
  s.output_ids = {5, 2, 4};  // max_new_tokens 3
  EXPECT_EQ(infer::stop_check(s, eos, 100), FinishReason::Length);
  s.params.stop_token_ids = {4};
  EXPECT_EQ(infer::stop_check(s, eos, 100), FinishReason::Stop);  // stop before length
  s.params.stop_token_ids = {};
  s.params.max_new_tokens = 10;
  EXPECT_EQ(infer::stop_check(s, eos, 7), FinishReason::Length);  // 4 + 3 = 7
  EXPECT_EQ(infer::stop_check(s, eos, 8), FinishReason::None);
  EXPECT_STREQ(infer::to_string(FinishReason::Stop), "stop");
  EXPECT_STREQ(infer::to_string(FinishReason::Length), "length");
  EXPECT_STREQ(infer::to_string(FinishReason::Abort), "abort");
  EXPECT_STREQ(infer::to_string(FinishReason::None), "");
}

TEST(Scheduler, BadRequestsAndMisuseAreClearErrors) {
  EXPECT_TRUE(throws_error([] { Scheduler(config(0, 4), {}); }, "scheduler", {"num_blocks"}));
  EXPECT_TRUE(throws_error([] { Scheduler(config(4, 4, 0), {}); }, "scheduler",
                           {"max_num_batched_tokens", "got 0"}));
  EXPECT_TRUE(
      throws_error([] { Scheduler(config(1 << 20, 1 << 12), {}); }, "scheduler", {"I32 slot"}));
  Scheduler s(config(2, 4, 1000, 1000, 8, /*max_len=*/16), {});
  // 5 + 5 tokens: at most 9 cached → 3 blocks of 4 > 2.
  EXPECT_TRUE(throws_error([&] { s.add(request(1, 5, 5)); }, "scheduler",
                           {"sequence 1", "can never fit", "3 blocks", "the pool has 2"}));
  EXPECT_NO_THROW(s.add(request(1, 5, 4)));  // 8 cached → 2 blocks
  // The context bounds what is cached: 4 + huge → 16 tokens, 15 cached → 4 blocks > 2.
  EXPECT_TRUE(throws_error([&] { s.add(request(7, 4, std::numeric_limits<int64_t>::max())); },
                           "scheduler", {"4 blocks"}));
  EXPECT_TRUE(throws_error([&] { s.add(request(1, 2, 1)); }, "scheduler", {"already queued"}));
  EXPECT_TRUE(throws_error([&] { s.add(request(2, 0, 1)); }, "scheduler", {"empty prompt"}));
  EXPECT_TRUE(throws_error([&] { s.add(request(3, 16, 1)); }, "scheduler",
                           {"16 tokens", "no room", "max_model_len 16"}));
  Sequence bad = request(4, 2, 1);
  bad.prompt_ids[1] = -3;
  EXPECT_TRUE(throws_error([&] { s.add(bad); }, "scheduler", {"prompt_ids[1]", "-3"}));
  bad = request(5, 2, 1);
  bad.params.top_p = 0.0f;
  EXPECT_TRUE(throws_error([&] { s.add(bad); }, "sampling params", {"top_p"}));
  bad = request(6, 2, 1);
  bad.output_ids = {3};
  EXPECT_TRUE(throws_error([&] { s.add(bad); }, "scheduler", {"must be new"}));
  // update() pairs with schedule().
  ScheduledBatch b = s.schedule();
  EXPECT_TRUE(throws_error([&] { s.schedule(); }, "scheduler", {"not been passed to update"}));
  EXPECT_TRUE(throws_error([&] { s.update(b, Ids{}); }, "scheduler", {"expected 1 sampled ids"}));
  EXPECT_TRUE(throws_error([&] { s.update(b, Ids{-1}); }, "scheduler", {"sampled id -1"}));
  ScheduledBatch stale = b;
  stale.step += 1;
  EXPECT_TRUE(throws_error([&] { s.update(stale, Ids{3}); }, "scheduler", {"expected the batch"}));
  s.update(b, Ids{3});
  EXPECT_TRUE(throws_error([&] { s.update(b, Ids{3}); }, "scheduler", {"already updated"}));
}

// Random arrivals, prompt lengths, budgets and aborts on a small pool. Every step: the
// budgets hold; every (sequence, position) that has or gets K/V maps to a slot inside the
// sequence's own blocks, distinct from every other sequence's except in the blocks it
// shares through the prefix cache (read-only: no step writes there); block tables are
// disjoint outside shared blocks and cover exactly the used blocks; the fake model reads
// the right token at every position and its tokens equal the reference. Every finished
// sequence equals the sequence run alone; at the end nothing is used. With `caching`, the
// prompts start with one of three common prefixes, so that admissions hit the cache.
struct RandomRunCounts {
  int64_t preemptions = 0, chunked = 0, aborted = 0, hit_tokens = 0;
};

void random_runs(bool caching, RandomRunCounts& counts) {
  for (uint32_t seed = 1; seed <= 12; ++seed) {
    std::mt19937 rng(seed);
    const int32_t bs = 2 + static_cast<int32_t>(rng() % 3);  // 2..4
    SchedulerConfig cfg = config(/*num_blocks=*/14, bs, /*budget=*/8 + rng() % 12,
                                 /*chunk=*/3 + rng() % 6, /*max_seqs=*/2 + rng() % 4,
                                 /*max_len=*/28);
    cfg.prefix_caching = caching;
    const Ids eos = {2};
    Scheduler s(cfg, eos);
    PagedFakeModel model(cfg.num_blocks, bs, /*shared=*/caching);
    std::map<int64_t, int64_t> arrival;  // id → step
    for (int64_t id = 1; id <= 24; ++id) arrival[id] = rng() % 30;
    std::map<int64_t, Sequence> requests;
    std::set<int64_t> live;
    for (int64_t t = 0; t < 2000 && (t <= 30 || !live.empty()); ++t) {
      for (const auto& [id, at] : arrival)
        if (at == t) {
          Sequence r = request(id, 1 + rng() % 14, 1 + rng() % 12);
          if (caching) {  // the first 0..12 ids from one of three common prefixes
            const int64_t common = std::min<int64_t>(rng() % 13, r.num_prompt_tokens());
            const int32_t base = static_cast<int32_t>(50000 + 100 * (rng() % 3));
            for (int64_t i = 0; i < common; ++i) r.prompt_ids[i] = base + static_cast<int32_t>(i);
          }
          if (rng() % 4 == 0) r.params.stop_token_ids = {static_cast<int32_t>(3 + rng() % 40)};
          requests[id] = r;
          s.add(r);
          live.insert(id);
        }
      if (!live.empty() && rng() % 40 == 0) {  // a client goes away
        auto it = live.begin();
        std::advance(it, static_cast<long>(rng() % live.size()));
        ASSERT_TRUE(s.abort(*it).has_value());
        live.erase(it);
        ++counts.aborted;
      }
      ScheduledBatch b = s.schedule();
      ASSERT_EQ(b.empty(), live.empty()) << "seed " << seed << " step " << t;
      if (b.empty()) continue;
      ASSERT_LE(b.num_tokens, cfg.max_num_batched_tokens);
      ASSERT_LE(b.num_seqs(), cfg.max_num_seqs);
      counts.preemptions += static_cast<int64_t>(b.preempted_ids.size());
      for (const auto& e : b.seqs) {
        ASSERT_TRUE(e.num_new_tokens == 1 || e.num_new_tokens <= cfg.prefill_chunk);
        counts.chunked += !e.sample;
      }
      // Slots of every cached or scheduled position of every live sequence: in the
      // sequence's own blocks, distinct outside shared (cached) blocks; block tables
      // disjoint outside them, covering the used blocks.
      std::map<int64_t, int64_t> new_tokens;
      for (const auto& e : b.seqs) new_tokens[e.seq_id] = e.num_new_tokens;
      std::set<int32_t> slots, blocks, shared;
      for (const int64_t id : live) {
        const Sequence& q = *s.find(id);
        for (const int32_t blk : q.block_table) {
          const bool cached = s.prefix_cache().is_cached(blk);
          ASSERT_TRUE(blocks.insert(blk).second || cached) << "block " << blk;
          if (cached) shared.insert(blk);
        }
        const int64_t upto = q.num_cached_tokens + new_tokens[id];
        ASSERT_LE(upto, static_cast<int64_t>(q.block_table.size()) * bs);
        for (int64_t pos = 0; pos < upto; ++pos) {
          const int32_t blk = q.block_table[pos / bs];
          ASSERT_TRUE(slots.insert(blk * bs + pos % bs).second || shared.contains(blk));
        }
      }
      ASSERT_EQ(static_cast<int64_t>(blocks.size()), s.num_used_blocks());
      infer::StepInputs in = infer::StepInputs::pack(b, bs);
      const infer::StepArrays a = in.arrays();
      std::set<int32_t> step_slots;
      for (size_t k = 0; k < b.seqs.size(); ++k)
        for (int32_t row = a.query_starts[k]; row < a.query_starts[k + 1]; ++row) {
          const Sequence& q = *b.seqs[k].seq;
          const int32_t pos = a.positions[row];
          ASSERT_EQ(a.slot_mapping[row], q.block_table[pos / bs] * bs + pos % bs);
          ASSERT_TRUE(step_slots.insert(a.slot_mapping[row]).second);
          ASSERT_FALSE(shared.contains(q.block_table[pos / bs])) << "a write to a shared block";
        }
      const Ids ids = model.step(b, in);
      for (size_t k = 0; k < b.seqs.size(); ++k)
        if (b.seqs[k].sample) ASSERT_EQ(ids[k], fake_next_token(all_tokens(*b.seqs[k].seq)));
      for (const Sequence& d : s.update(b, ids)) {
        ASSERT_EQ(d.output_ids, fake_reference_outputs(requests.at(d.id), eos, cfg.max_model_len))
            << "seed " << seed << " sequence " << d.id;
        EXPECT_TRUE(d.finish_reason == FinishReason::Stop ||
                    d.finish_reason == FinishReason::Length);
        live.erase(d.id);
      }
    }
    EXPECT_TRUE(live.empty()) << "seed " << seed;
    EXPECT_FALSE(s.has_unfinished());
    EXPECT_EQ(s.num_used_blocks(), 0);
    EXPECT_EQ(s.allocator().num_used(), s.prefix_cache().num_cached());  // the cache's holds
    EXPECT_EQ(s.num_running() + s.num_waiting(), 0);
    counts.hit_tokens += s.prefix_cache_hits();
  }
}

TEST(SchedulerProperty, RandomRunsKeepSlotsConsistentAndTokensRight) {
  RandomRunCounts counts;
  random_runs(/*caching=*/false, counts);
  // The runs did exercise what they are meant to.
  EXPECT_GT(counts.preemptions, 0);
  EXPECT_GT(counts.chunked, 0);
  EXPECT_GT(counts.aborted, 0);
  EXPECT_EQ(counts.hit_tokens, 0);
}

TEST(SchedulerProperty, RandomRunsWithThePrefixCacheShareOnlyWhatIsCached) {
  RandomRunCounts counts;
  random_runs(/*caching=*/true, counts);
  EXPECT_GT(counts.preemptions, 0);
  EXPECT_GT(counts.chunked, 0);
  EXPECT_GT(counts.aborted, 0);
  EXPECT_GT(counts.hit_tokens, 0);
}

// A finished sequence's full prefill blocks serve the next sequence with the same prefix:
// it starts after them, keeps at least two tokens to compute, and the cache's blocks stay
// out of the used count once nobody holds them.
TEST(Scheduler, PrefixCacheHitStartsAfterTheCachedBlocks) {
  SchedulerConfig cfg = config(/*num_blocks=*/8, /*block_size=*/4);
  cfg.prefix_caching = true;
  Scheduler s(cfg, {2});
  PagedFakeModel model(cfg.num_blocks, 4, /*shared=*/true);
  ScheduledBatch b;
  Sequence first = request(1, 10, 2);
  s.add(first);
  step(s, model, b);
  EXPECT_EQ(entries(b), (std::vector<Entry>{{1, 10, 0, true}}));
  step(s, model, b);  // its decode (2nd token) ends it
  EXPECT_FALSE(s.has_unfinished());
  EXPECT_EQ(s.num_used_blocks(), 0);
  EXPECT_EQ(s.prefix_cache().num_cached(), 2);  // blocks of tokens 0..7; 8..9 not full
  EXPECT_EQ(s.num_free_blocks(), 8);

  Sequence again = first;  // the same prompt: 2 blocks hit, 2 tokens computed
  again.id = 2;
  s.add(again);
  step(s, model, b);
  EXPECT_EQ(entries(b), (std::vector<Entry>{{2, 2, 8, true}}));
  EXPECT_EQ(b.seqs[0].seq->num_prefix_hit_tokens, 8);
  EXPECT_EQ(s.prefix_cache_hits(), 8);
  EXPECT_EQ(s.prefix_cache_queries(), 10 + 10);
  ASSERT_TRUE(s.abort(2).has_value());

  Sequence eight = request(1, 8, 2);  // 8 = 2 blocks: only 1 may hit, 4 tokens computed
  eight.id = 3;
  s.add(eight);
  step(s, model, b);
  EXPECT_EQ(entries(b), (std::vector<Entry>{{3, 4, 4, true}}));
  ASSERT_TRUE(s.abort(3).has_value());

  Sequence other = request(1, 10, 2);  // another second block: only the first hits
  other.id = 4;
  other.prompt_ids[5] = 7;
  s.add(other);
  step(s, model, b);
  EXPECT_EQ(entries(b), (std::vector<Entry>{{4, 6, 4, true}}));
  ASSERT_TRUE(s.abort(4).has_value());
  EXPECT_EQ(s.num_used_blocks(), 0);
}

// Blocks only the cache holds are handed out when nothing else is free, least recently
// released first; a chain's last block before its first.
TEST(Scheduler, PrefixCacheBlocksAreEvictedWhenThePoolRunsOut) {
  SchedulerConfig cfg = config(/*num_blocks=*/4, /*block_size=*/2);
  cfg.prefix_caching = true;
  Scheduler s(cfg, {2});
  PagedFakeModel model(cfg.num_blocks, 2, /*shared=*/true);
  ScheduledBatch b;
  s.add(request(1, 7, 1));  // 4 blocks; 3 full ones cached
  step(s, model, b);
  EXPECT_FALSE(s.has_unfinished());
  EXPECT_EQ(s.prefix_cache().num_cached(), 3);
  EXPECT_EQ(s.num_free_blocks(), 4);
  s.add(request(2, 5, 1));  // 3 blocks: the free one and two evicted
  step(s, model, b);
  EXPECT_EQ(entries(b), (std::vector<Entry>{{2, 5, 0, true}}));
  EXPECT_EQ(s.prefix_cache().num_cached(), 2 + 1);  // sequence 1's first + sequence 2's two
  Sequence again = request(1, 7, 1);                // sequence 1's first block survived
  again.id = 3;
  s.add(again);
  step(s, model, b);
  EXPECT_EQ(entries(b), (std::vector<Entry>{{3, 5, 2, true}}));
  EXPECT_EQ(s.num_used_blocks(), 0);
}

}  // namespace
}  // namespace microllm::testing
