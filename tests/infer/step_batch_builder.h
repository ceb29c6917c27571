// Hand-built inference steps for DecoderStep tests (CPU and CUDA): a paged layout of
// sequences over a block pool and the StepBatch of one step over it.
#pragma once

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "microllm/model/step_batch.h"

namespace microllm::testing {

// A paged layout: every sequence gets ceil(len / BS) blocks taken from the pool 0..NB−1, in
// order or shuffled.
struct Paging {
  int64_t block_size;
  std::vector<std::vector<int64_t>> tables;  // per sequence
};

inline Paging make_paging(const std::vector<int64_t>& lens, int64_t block_size, int64_t num_blocks,
                          bool shuffle) {
  std::vector<int64_t> pool(static_cast<size_t>(num_blocks));
  std::iota(pool.begin(), pool.end(), 0);
  if (shuffle) std::shuffle(pool.begin(), pool.end(), std::mt19937_64(9));
  Paging p{block_size, {}};
  size_t next = 0;
  for (int64_t len : lens) {
    std::vector<int64_t> table;
    for (int64_t b = 0; b < (len + block_size - 1) / block_size; ++b) table.push_back(pool[next++]);
    p.tables.push_back(table);
  }
  return p;
}

// One step in which sequence b adds tokens [starts[b], starts[b] + new_ids[b].size()), with
// block tables M wide, its tensors on `device`; num_decode_rows is left 0.
inline model::StepBatch make_step(const std::vector<std::vector<int32_t>>& new_ids,
                                  const std::vector<int64_t>& starts, const Paging& paging,
                                  int64_t M, Device device = Device::cpu()) {
  std::vector<int64_t> ids, positions, slots, query_starts{0}, seq_lens, tables, last_rows;
  for (size_t b = 0; b < new_ids.size(); ++b) {
    for (size_t i = 0; i < new_ids[b].size(); ++i) {
      const int64_t pos = starts[b] + static_cast<int64_t>(i);
      ids.push_back(new_ids[b][i]);
      positions.push_back(pos);
      slots.push_back(paging.tables[b][static_cast<size_t>(pos / paging.block_size)] *
                          paging.block_size +
                      pos % paging.block_size);
    }
    query_starts.push_back(static_cast<int64_t>(ids.size()));
    seq_lens.push_back(starts[b] + static_cast<int64_t>(new_ids[b].size()));
    last_rows.push_back(static_cast<int64_t>(ids.size()) - 1);
    for (int64_t m = 0; m < M; ++m)
      tables.push_back(m < static_cast<int64_t>(paging.tables[b].size())
                           ? paging.tables[b][static_cast<size_t>(m)]
                           : -1);
  }
  auto i32 = [&](const std::vector<int64_t>& v, const Shape& shape) {
    return Tensor::from_vector(v, shape, DType::I32).to(device);
  };
  const int64_t N = static_cast<int64_t>(ids.size()), B = static_cast<int64_t>(new_ids.size());
  model::StepBatch s;
  s.token_ids = i32(ids, {N});
  s.positions = i32(positions, {N});
  s.slot_mapping = i32(slots, {N});
  s.query_starts = i32(query_starts, {B + 1});
  s.seq_lens = i32(seq_lens, {B});
  s.block_tables = i32(tables, {B, M});
  s.last_rows = i32(last_rows, {B});
  s.num_tokens = N;
  s.num_seqs = B;
  return s;
}

}  // namespace microllm::testing
