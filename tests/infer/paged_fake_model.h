// A stand-in for DecoderStep + Sampler over a paged KV cache, for the host-side tests.
//
// The "cache" has NB·BS slots; a step writes (sequence id, position, token) of every row to
// slot_mapping[row] (−1: nothing), then each sequence b reads its keys 0..seq_lens[b)−1
// through block_tables[b] and its next token is a hash of the tokens read. Every slot read
// must hold the sequence's own token at that position; without sharing (the default) it
// must also have been written by the sequence itself, with sharing (prefix caching) it may
// have been written by another sequence with the same prefix. The reference
// is the same hash of prompt + outputs computed from the Sequence directly. A wrong slot, a
// block freed and reused while still needed, a missing recompute after preemption or a
// wrong position gives another token (or a tag mismatch, reported as a test failure).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <span>
#include <vector>

#include "microllm/infer/scheduler.h"
#include "microllm/infer/step_inputs.h"

namespace microllm::testing {

inline constexpr int32_t kFakeVocab = 1000;

// FNV-1a over the ids, mapped to [3, kFakeVocab): ids 0..2 are never produced (EOS-free).
inline int32_t fake_next_token(std::span<const int32_t> history) {
  uint64_t h = 1469598103934665603ull;
  for (const int32_t t : history) {
    h ^= static_cast<uint64_t>(t) + 0x9E37u;
    h *= 1099511628211ull;
  }
  return 3 + static_cast<int32_t>(h % (kFakeVocab - 3));
}

inline std::vector<int32_t> all_tokens(const infer::Sequence& s) {
  std::vector<int32_t> t = s.prompt_ids;
  t.insert(t.end(), s.output_ids.begin(), s.output_ids.end());
  return t;
}

// The outputs the sequence would get alone with the fake model, stop rules included.
inline std::vector<int32_t> fake_reference_outputs(infer::Sequence s,
                                                   std::span<const int32_t> eos_ids,
                                                   int64_t max_model_len) {
  s.output_ids.clear();
  do {
    s.output_ids.push_back(fake_next_token(all_tokens(s)));
  } while (infer::stop_check(s, eos_ids, max_model_len) == infer::FinishReason::None);
  return s.output_ids;
}

class PagedFakeModel {
 public:
  PagedFakeModel(int32_t num_blocks, int32_t block_size, bool shared = false)
      : block_size_(block_size),
        shared_(shared),
        slots_(static_cast<size_t>(num_blocks) * block_size) {}

  // One id per batch entry: the hash of the keys sequence b reads after this step's writes.
  std::vector<int32_t> step(const infer::ScheduledBatch& batch, infer::StepInputs& in) {
    infer::StepArrays a = in.arrays();
    const int64_t m = in.layout().dims.max_blocks;
    for (size_t b = 0; b < batch.seqs.size(); ++b)
      for (int32_t row = a.query_starts[b]; row < a.query_starts[b + 1]; ++row) {
        if (a.slot_mapping[row] < 0) continue;
        slots_.at(static_cast<size_t>(a.slot_mapping[row])) = {batch.seqs[b].seq_id,
                                                               a.positions[row], a.token_ids[row]};
      }
    std::vector<int32_t> ids;
    for (size_t b = 0; b < batch.seqs.size(); ++b) {
      std::vector<int32_t> keys;
      for (int32_t pos = 0; pos < a.seq_lens[b]; ++pos) {
        const int32_t block = a.block_tables[static_cast<int64_t>(b) * m + pos / block_size_];
        EXPECT_GE(block, 0) << "sequence " << batch.seqs[b].seq_id << " position " << pos;
        if (block < 0) return ids;
        const Slot& slot = slots_.at(static_cast<size_t>(block * block_size_ + pos % block_size_));
        const infer::Sequence& seq = *batch.seqs[b].seq;
        EXPECT_TRUE((shared_ || slot.seq_id == seq.id) && slot.position == pos &&
                    slot.token == seq.token(pos))
            << "sequence " << seq.id << " position " << pos << " (token " << seq.token(pos)
            << ") reads a slot of sequence " << slot.seq_id << " position " << slot.position
            << " token " << slot.token;
        keys.push_back(slot.token);
      }
      ids.push_back(fake_next_token(keys));
    }
    return ids;
  }

 private:
  struct Slot {
    int64_t seq_id = -1;
    int32_t position = -1;
    int32_t token = -1;
  };
  int32_t block_size_;
  bool shared_;
  std::vector<Slot> slots_;
};

}  // namespace microllm::testing
