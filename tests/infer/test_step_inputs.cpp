// StepInputs: the packed arrays of a small mixed batch (one decode, one prefill chunk, one
// whole short prompt) against values derived by hand from the scheduling below, with and
// without padding; the byte layout; a caller's buffer; the error paths.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "core/expect_error.h"
#include "microllm/infer/scheduler.h"
#include "microllm/infer/step_inputs.h"

namespace microllm::testing {
namespace {

using infer::ScheduledBatch;
using infer::Scheduler;
using infer::Sequence;
using infer::StepArrays;
using Ids = std::vector<int32_t>;

template <class T>
std::vector<T> vec(std::span<T> s) {
  return {s.begin(), s.end()};
}

Sequence make(int64_t id, Ids prompt) {
  Sequence s;
  s.id = id;
  s.prompt_ids = std::move(prompt);
  return s;
}

// The batch, derived by hand (BS 4, prefill_chunk 4, 8 blocks, max_model_len 16, LIFO
// allocation 0, 1, 2 ...):
//   step 1: A = [11 12 13] alone: 3 tokens, 1 block → A.block_table [0]; sampled 50.
//   step 2: A decodes 50 at position 3 (block 0 offset 3 = slot 3, no new block);
//           B = [21 .. 26] arrives: first chunk of 4 = 21 22 23 24 at 0..3, block 1 →
//           slots 4..7, not sampled; C = [31 32] arrives: whole, block 2 → slots 8, 9,
//           sampled.
//   rows:          A | B B B B | C C         N = 7, B = 3
//   query_starts   0, 1, 5, 7;  last_rows 0, 4, 6;  seq_lens 4, 4, 2
//   block_tables   [0], [1], [2] (M = 1, each holds one block)
//   sample_index   outputs so far: A 1, B 0, C 0; prompt_lens 3, 6, 2
//   history        A samples with a repetition penalty: 11 12 13 50; B does not sample
//                  this step: −1s; C samples with a frequency penalty: 31 32; L = 4.
struct MixedBatch {
  Scheduler scheduler{[] {
                        infer::SchedulerConfig c;
                        c.block_size = 4;
                        c.num_blocks = 8;
                        c.prefill_chunk = 4;
                        c.max_model_len = 16;
                        return c;
                      }(),
                      {}};
  ScheduledBatch batch;
  MixedBatch() {
    Sequence a = make(1, {11, 12, 13});
    a.params.temperature = 0.5f;
    a.params.top_k = 5;
    a.params.repetition_penalty = 1.3f;
    a.params.seed = 7;
    a.params.logprobs = 3;
    scheduler.add(a);
    ScheduledBatch first = scheduler.schedule();
    scheduler.update(first, Ids{50});
    scheduler.add(make(2, {21, 22, 23, 24, 25, 26}));
    Sequence c = make(3, {31, 32});
    c.params.top_p = 0.9f;
    c.params.min_p = 0.05f;
    c.params.frequency_penalty = 0.5f;
    c.params.presence_penalty = -0.25f;
    c.params.seed = 0xFFFFFFFFFFFFFFFFull;
    scheduler.add(c);
    batch = scheduler.schedule();
  }
};

TEST(StepInputs, MixedBatchMatchesTheHandDerivedArrays) {
  MixedBatch m;
  infer::StepInputs in = infer::StepInputs::pack(m.batch, 4);
  EXPECT_EQ(in.layout().dims.num_tokens, 7);
  EXPECT_EQ(in.layout().dims.num_seqs, 3);
  EXPECT_EQ(in.layout().dims.max_blocks, 1);
  EXPECT_EQ(in.layout().dims.history_len, 4);
  const StepArrays a = in.arrays();
  EXPECT_EQ(vec(a.token_ids), (Ids{50, 21, 22, 23, 24, 31, 32}));
  EXPECT_EQ(vec(a.positions), (Ids{3, 0, 1, 2, 3, 0, 1}));
  EXPECT_EQ(vec(a.slot_mapping), (Ids{3, 4, 5, 6, 7, 8, 9}));
  EXPECT_EQ(vec(a.query_starts), (Ids{0, 1, 5, 7}));
  EXPECT_EQ(vec(a.seq_lens), (Ids{4, 4, 2}));
  EXPECT_EQ(vec(a.block_tables), (Ids{0, 1, 2}));
  EXPECT_EQ(vec(a.last_rows), (Ids{0, 4, 6}));
  EXPECT_EQ(vec(a.temperature), (std::vector<float>{0.5f, 1.0f, 1.0f}));
  EXPECT_EQ(vec(a.top_k), (Ids{5, 0, 0}));
  EXPECT_EQ(vec(a.top_p), (std::vector<float>{1.0f, 1.0f, 0.9f}));
  EXPECT_EQ(vec(a.min_p), (std::vector<float>{0.0f, 0.0f, 0.05f}));
  EXPECT_EQ(vec(a.repetition_penalty), (std::vector<float>{1.3f, 1.0f, 1.0f}));
  EXPECT_EQ(vec(a.frequency_penalty), (std::vector<float>{0.0f, 0.0f, 0.5f}));
  EXPECT_EQ(vec(a.presence_penalty), (std::vector<float>{0.0f, 0.0f, -0.25f}));
  EXPECT_EQ(vec(a.seed), (std::vector<uint64_t>{7, 0, 0xFFFFFFFFFFFFFFFFull}));
  EXPECT_EQ(vec(a.sample_index), (Ids{1, 0, 0}));
  EXPECT_EQ(vec(a.num_logprobs), (Ids{3, -1, -1}));
  EXPECT_EQ(vec(a.prompt_lens), (Ids{3, 6, 2}));
  EXPECT_EQ(vec(a.history), (Ids{11, 12, 13, 50, -1, -1, -1, -1, 31, 32, -1, -1}));
}

// The same batch padded to N 8, B 4, M 3, L 5: padded token row 7 writes nothing (slot −1);
// padded sequence 3 owns no rows (query_starts stays at 7), sees no keys, reads row 0 and
// samples greedily; block tables and history are −1 past their ends.
TEST(StepInputs, PaddedRowsWriteNothingAndPaddedSequencesOwnNoRows) {
  MixedBatch m;
  infer::PackOptions o;
  o.padded_num_tokens = 8;
  o.padded_num_seqs = 4;
  o.max_blocks = 3;
  o.history_len = 5;
  infer::StepInputs in = infer::StepInputs::pack(m.batch, 4, o);
  const StepArrays a = in.arrays();
  EXPECT_EQ(vec(a.token_ids), (Ids{50, 21, 22, 23, 24, 31, 32, 0}));
  EXPECT_EQ(vec(a.positions), (Ids{3, 0, 1, 2, 3, 0, 1, 0}));
  EXPECT_EQ(vec(a.slot_mapping), (Ids{3, 4, 5, 6, 7, 8, 9, -1}));
  EXPECT_EQ(vec(a.query_starts), (Ids{0, 1, 5, 7, 7}));
  EXPECT_EQ(vec(a.seq_lens), (Ids{4, 4, 2, 0}));
  EXPECT_EQ(vec(a.block_tables), (Ids{0, -1, -1, 1, -1, -1, 2, -1, -1, -1, -1, -1}));
  EXPECT_EQ(vec(a.last_rows), (Ids{0, 4, 6, 0}));
  EXPECT_EQ(a.temperature[3], 0.0f);
  EXPECT_EQ(a.top_k[3], 0);
  EXPECT_EQ(a.top_p[3], 1.0f);
  EXPECT_EQ(a.repetition_penalty[3], 1.0f);
  EXPECT_EQ(a.num_logprobs[3], -1);
  EXPECT_EQ(a.prompt_lens[3], 0);
  EXPECT_EQ(vec(a.history),
            (Ids{11, 12, 13, 50, -1, -1, -1, -1, -1, -1, 31, 32, -1, -1, -1, -1, -1, -1, -1, -1}));
}

TEST(StepInputs, LayoutPlacesEveryArrayOnItsOwnAlignedRange) {
  // N 7, B 3, M 1, L 4: every array is ≤ 256 bytes, so array k starts at k · 256; 19 arrays.
  const infer::StepLayout l = infer::step_layout({7, 3, 1, 4});
  const std::vector<int64_t> offsets = {l.token_ids,
                                        l.positions,
                                        l.slot_mapping,
                                        l.query_starts,
                                        l.seq_lens,
                                        l.block_tables,
                                        l.last_rows,
                                        l.temperature,
                                        l.top_k,
                                        l.top_p,
                                        l.min_p,
                                        l.repetition_penalty,
                                        l.frequency_penalty,
                                        l.presence_penalty,
                                        l.seed,
                                        l.sample_index,
                                        l.num_logprobs,
                                        l.prompt_lens,
                                        l.history};
  for (size_t k = 0; k < offsets.size(); ++k) EXPECT_EQ(offsets[k], 256 * int64_t(k)) << k;
  EXPECT_EQ(l.total_bytes, 19 * 256);
  // N 100: token_ids take 400 bytes → positions at 512; L 0: the history is empty and ends
  // the buffer.
  const infer::StepLayout big = infer::step_layout({100, 3, 2, 0});
  EXPECT_EQ(big.positions, 512);
  EXPECT_EQ(big.slot_mapping, 1024);
  EXPECT_EQ(big.query_starts, 1536);
  EXPECT_EQ(big.total_bytes, big.history);
  EXPECT_TRUE(throws_error([] { infer::step_layout({0, 1, 0, 0}); }, "step inputs", {"N 0"}));
}

TEST(StepInputs, PackIntoACallersBufferEqualsTheOwnedOne) {
  MixedBatch m;
  const infer::StepInputs owned = infer::StepInputs::pack(m.batch, 4);
  const infer::StepLayout& l = owned.layout();
  std::vector<uint64_t> storage(static_cast<size_t>(l.total_bytes) / 8 + 64, ~0ull);
  std::span<std::byte> buffer(reinterpret_cast<std::byte*>(storage.data()), storage.size() * 8);
  infer::pack_step(m.batch, 4, l, buffer);
  EXPECT_EQ(std::memcmp(buffer.data() + l.token_ids, owned.bytes().data() + l.token_ids, 7 * 4), 0);
  // Every array compared through the typed views.
  const StepArrays a = infer::step_arrays(l, buffer);
  infer::StepInputs copy = owned;
  const StepArrays b = copy.arrays();
  EXPECT_EQ(vec(a.slot_mapping), vec(b.slot_mapping));
  EXPECT_EQ(vec(a.history), vec(b.history));
  EXPECT_EQ(vec(a.seed), vec(b.seed));
  EXPECT_EQ(vec(a.block_tables), vec(b.block_tables));
  // Too small, misaligned.
  EXPECT_TRUE(throws_error([&] { infer::pack_step(m.batch, 4, l, buffer.first(100)); },
                           "step inputs", {"100 bytes"}));
  EXPECT_TRUE(throws_error([&] { infer::pack_step(m.batch, 4, l, buffer.subspan(4)); },
                           "step inputs", {"8-byte aligned"}));
}

TEST(StepInputs, OptionsBelowTheBatchAndEmptyBatchesAreErrors) {
  MixedBatch m;
  const auto with = [&](infer::PackOptions o, std::initializer_list<std::string_view> f) {
    return throws_error([&] { infer::StepInputs::pack(m.batch, 4, o); }, "step inputs", f);
  };
  EXPECT_TRUE(with({.padded_num_tokens = 6}, {"padded_num_tokens 6", "batch's 7"}));
  EXPECT_TRUE(with({.padded_num_seqs = 2}, {"padded_num_seqs 2", "batch's 3"}));
  EXPECT_TRUE(with({.history_len = 3}, {"history_len 3", "batch's 4"}));
  infer::PackOptions zero_history;
  zero_history.history_len = 0;
  EXPECT_TRUE(with(zero_history, {"history_len 0"}));
  const infer::StepLayout small = infer::step_layout({7, 3, 1, 0});
  std::vector<uint64_t> storage(static_cast<size_t>(small.total_bytes) / 8 + 1);
  std::span<std::byte> buffer(reinterpret_cast<std::byte*>(storage.data()), storage.size() * 8);
  EXPECT_TRUE(throws_error([&] { infer::pack_step(m.batch, 4, small, buffer); }, "step inputs",
                           {"smaller than the batch needs", "L 4"}));
  EXPECT_TRUE(throws_error([] { infer::StepInputs::pack(ScheduledBatch{}, 4); }, "step inputs",
                           {"empty batch"}));
}

}  // namespace
}  // namespace microllm::testing
