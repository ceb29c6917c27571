// Test fixture for the paged KV-cache operators (CPU and CUDA suites): sequences of random
// queries, keys and values, a shuffled block layout in a pool, the flattened step tensors of
// any mix of new-token ranges (whole prefill, chunks, decode, padding rows), and the
// reference output of ops::attention run per sequence with explicit positions.
//
// Layout: a sequence holds q (T_b, H, D), k, v (T_b, Hkv, D) in F32; a step packs rows
// [begin_b, end_b) of every sequence b in order, then `padding` rows with slot −1.
#pragma once

#include <algorithm>
#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include "microllm/core/random.h"
#include "microllm/core/tensor.h"
#include "microllm/ops/attention.h"
#include "microllm/ops/paged_attention.h"

namespace microllm::testing::paged {

struct Sequence {
  Tensor q;     // (T_b, H, D) F32
  Tensor k, v;  // (T_b, Hkv, D) F32
};

// Sequences of the given lengths; with `round_to` BF16 their values are BF16-representable,
// so a BF16 cache holds them exactly and the reference sees what the paged op sees.
inline std::vector<Sequence> make_sequences(const std::vector<int64_t>& lengths, int64_t H,
                                            int64_t Hkv, int64_t D, uint64_t seed,
                                            DType round_to = DType::F32) {
  Generator gen(seed);
  std::vector<Sequence> seqs;
  for (int64_t T : lengths) {
    Sequence s;
    s.q = randn({T, H, D}, gen).to(round_to).to(DType::F32);
    s.k = randn({T, Hkv, D}, gen).to(round_to).to(DType::F32);
    s.v = randn({T, Hkv, D}, gen).to(round_to).to(DType::F32);
    seqs.push_back(s);
  }
  return seqs;
}

// Physical blocks of each sequence: ceil(T_b / BS) blocks drawn from a shuffled pool of
// NB = (blocks needed) + `spare` blocks, so no sequence's blocks are contiguous or ordered.
struct Layout {
  int64_t NB = 0, BS = 0, M = 0;             // pool blocks, block size, block-table width
  std::vector<std::vector<int32_t>> blocks;  // per sequence, in logical order
  int64_t slot(int64_t b, int64_t j) const { return blocks[b][j / BS] * BS + j % BS; }
};

inline Layout make_layout(const std::vector<int64_t>& lengths, int64_t BS, uint64_t seed,
                          int64_t spare = 3, int64_t extra_columns = 1) {
  Layout layout;
  layout.BS = BS;
  int64_t needed = 0, widest = 0;
  for (int64_t T : lengths) {
    needed += (T + BS - 1) / BS;
    widest = std::max(widest, (T + BS - 1) / BS);
  }
  layout.NB = needed + spare;
  layout.M = widest + extra_columns;
  std::vector<int32_t> pool(static_cast<size_t>(layout.NB));
  for (size_t i = 0; i < pool.size(); ++i) pool[i] = static_cast<int32_t>(i);
  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::shuffle(pool.begin(), pool.end(), rng);
  size_t next = 0;
  for (int64_t T : lengths) {
    std::vector<int32_t> mine;
    for (int64_t i = 0; i < (T + BS - 1) / BS; ++i) mine.push_back(pool[next++]);
    layout.blocks.push_back(mine);
  }
  return layout;
}

// The flattened step tensors (CPU).
struct Step {
  Tensor q;                     // (N, H, D) in the step dtype
  Tensor k, v;                  // (N, Hkv, D) in the step dtype
  Tensor slot_mapping;          // (N) I32, −1 for padding rows
  Tensor query_starts;          // (B+1) I32
  Tensor seq_lens;              // (B) I32: end_b
  Tensor block_tables;          // (B, M) I32, −1 past each sequence's blocks
  int64_t max_seq_len = 0;      // max_b end_b
  std::vector<int64_t> row_of;  // first row of each sequence
};

using Ranges = std::vector<std::pair<int64_t, int64_t>>;  // [begin_b, end_b) per sequence

inline Tensor i32(const std::vector<int64_t>& values, const Shape& shape) {
  return Tensor::from_vector(values, shape, DType::I32);
}

// Rows [begin_b, end_b) of every sequence, then `padding` rows of random values and slot −1.
inline Step make_step(const std::vector<Sequence>& seqs, const Layout& layout, const Ranges& ranges,
                      int64_t padding, DType dtype, uint64_t seed = 99) {
  const int64_t B = static_cast<int64_t>(seqs.size());
  const int64_t H = seqs[0].q.size(1), Hkv = seqs[0].k.size(1), D = seqs[0].q.size(2);
  std::vector<double> q, k, v;
  std::vector<int64_t> slots, starts = {0}, lens, tables;
  Step step;
  for (int64_t b = 0; b < B; ++b) {
    const auto [begin, end] = ranges[b];
    step.row_of.push_back(starts.back());
    const int64_t n = end - begin;
    const std::vector<double> qb = seqs[b].q.narrow(0, begin, n).to_vector_f64(),
                              kb = seqs[b].k.narrow(0, begin, n).to_vector_f64(),
                              vb = seqs[b].v.narrow(0, begin, n).to_vector_f64();
    q.insert(q.end(), qb.begin(), qb.end());
    k.insert(k.end(), kb.begin(), kb.end());
    v.insert(v.end(), vb.begin(), vb.end());
    for (int64_t j = begin; j < end; ++j) slots.push_back(layout.slot(b, j));
    starts.push_back(starts.back() + end - begin);
    lens.push_back(end);
    step.max_seq_len = std::max(step.max_seq_len, end);
    for (int64_t m = 0; m < layout.M; ++m)
      tables.push_back(m < static_cast<int64_t>(layout.blocks[b].size()) ? layout.blocks[b][m]
                                                                         : -1);
  }
  Generator gen(seed);
  for (int64_t r = 0; r < padding; ++r) {
    const std::vector<double> pq = randn({H * D}, gen, DType::F64).to_vector_f64();
    const std::vector<double> pk = randn({Hkv * D}, gen, DType::F64).to_vector_f64();
    q.insert(q.end(), pq.begin(), pq.end());
    k.insert(k.end(), pk.begin(), pk.end());
    v.insert(v.end(), pk.begin(), pk.end());
    slots.push_back(-1);
  }
  const int64_t N = static_cast<int64_t>(slots.size());
  step.q = Tensor::from_vector(q, {N, H, D}, dtype);
  step.k = Tensor::from_vector(k, {N, Hkv, D}, dtype);
  step.v = Tensor::from_vector(v, {N, Hkv, D}, dtype);
  step.slot_mapping = i32(slots, {N});
  step.query_starts = i32(starts, {B + 1});
  step.seq_lens = i32(lens, {B});
  step.block_tables = i32(tables, {B, layout.M});
  return step;
}

// Three schedules of the same sequences, each meant for fresh caches: whole prefill; prefill
// in three chunks; prefill of all but the last token, then one decode step.
inline std::vector<std::vector<Ranges>> standard_schedules(const std::vector<int64_t>& lengths) {
  Ranges whole, first, second, third, head, tail;
  for (int64_t T : lengths) {
    whole.push_back({0, T});
    first.push_back({0, T / 3});
    second.push_back({T / 3, 2 * T / 3});
    third.push_back({2 * T / 3, T});
    head.push_back({0, T - 1});
    tail.push_back({T - 1, T});
  }
  return {{whole}, {first, second, third}, {head, tail}};
}

// The step's tensors on `device`.
inline Step to_device(const Step& step, Device device) {
  Step moved = step;
  for (Tensor* t : {&moved.q, &moved.k, &moved.v, &moved.slot_mapping, &moved.query_starts,
                    &moved.seq_lens, &moved.block_tables})
    *t = t->to(device);
  return moved;
}

// F32 workspace for one call with `max_seq_len` (zero-filled, as paged_attention asks),
// undefined when the call needs none.
inline Tensor workspace_for(const Step& step, int64_t max_seq_len, Device device = Device::cpu()) {
  const int64_t bytes = ops::paged_attention_workspace_bytes(
      step.q.size(0), step.q.size(1), step.k.size(1), step.q.size(2), max_seq_len);
  return bytes > 0 ? Tensor::zeros({bytes / 4}, DType::F32, device) : Tensor();
}

// ops::attention on sequence b's queries [begin, end) over its keys 0..end−1, with explicit
// positions, as (end − begin, H, D) F32 (F64 when `dtype` is F64).
inline Tensor reference_rows(const Sequence& s, int64_t begin, int64_t end,
                             DType dtype = DType::F32, double scale = NAN) {
  const int64_t n = end - begin;
  const Tensor q = s.q.narrow(0, begin, n).permute({1, 0, 2}).unsqueeze(0).to(dtype);  // (1,H,n,D)
  const Tensor k =
      s.k.narrow(0, 0, end).permute({1, 0, 2}).unsqueeze(0).to(dtype);  // (1,Hkv,end,D)
  const Tensor v = s.v.narrow(0, 0, end).permute({1, 0, 2}).unsqueeze(0).to(dtype);
  ops::AttentionOptions options;
  options.scale = scale;
  std::vector<int64_t> q_pos, k_pos;
  for (int64_t i = begin; i < end; ++i) q_pos.push_back(i);
  for (int64_t j = 0; j < end; ++j) k_pos.push_back(j);
  options.q_positions = Tensor::from_vector(q_pos, {n}, DType::I64);
  options.k_positions = Tensor::from_vector(k_pos, {end}, DType::I64);
  return ops::attention(q, k, v, options).squeeze(0).permute({1, 0, 2}).contiguous();  // (n,H,D)
}

// Caches (NB, BS, Hkv, D) filled with NaN: a kernel that reads a slot no token was written to
// turns the output into NaN.
inline Tensor nan_cache(const Layout& layout, int64_t Hkv, int64_t D, DType dtype,
                        Device device = Device::cpu()) {
  return Tensor::full({layout.NB, layout.BS, Hkv, D}, NAN, dtype, device);
}

}  // namespace microllm::testing::paged
