// Packing a ScheduledBatch into the one-buffer StepBatch layout (format in the header).
#include "microllm/infer/step_inputs.h"

#include <algorithm>
#include <cstring>

#include "microllm/core/error.h"

namespace microllm::infer {
namespace {

constexpr const char* kOp = "step inputs";

int64_t align_up(int64_t x) { return (x + kStepAlignment - 1) / kStepAlignment * kStepAlignment; }

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// History a row needs: prompt + outputs when it samples with a penalty, else none.
int64_t history_needed(const ScheduledSeq& e) {
  return e.sample && e.seq->params.uses_history() ? e.seq->num_tokens() : 0;
}

template <class T>
std::span<T> view(std::span<std::byte> buffer, int64_t offset, int64_t count) {
  return {reinterpret_cast<T*>(buffer.data() + offset), static_cast<size_t>(count)};
}

}  // namespace

StepLayout step_layout(const StepDims& d) {
  MICROLLM_CHECK(d.num_tokens >= 1 && d.num_seqs >= 1 && d.max_blocks >= 0 && d.history_len >= 0,
                 kOp, "layout: expected N >= 1, B >= 1, M >= 0, L >= 0, got N ", d.num_tokens,
                 ", B ", d.num_seqs, ", M ", d.max_blocks, ", L ", d.history_len);
  StepLayout l;
  l.dims = d;
  int64_t at = 0;
  const auto place = [&at](int64_t& offset, int64_t count, int64_t element_bytes) {
    offset = at;
    at = align_up(at + count * element_bytes);
  };
  const int64_t n = d.num_tokens, b = d.num_seqs;
  place(l.token_ids, n, 4);
  place(l.positions, n, 4);
  place(l.slot_mapping, n, 4);
  place(l.query_starts, b + 1, 4);
  place(l.seq_lens, b, 4);
  place(l.block_tables, b * d.max_blocks, 4);
  place(l.last_rows, b, 4);
  place(l.temperature, b, 4);
  place(l.top_k, b, 4);
  place(l.top_p, b, 4);
  place(l.min_p, b, 4);
  place(l.repetition_penalty, b, 4);
  place(l.frequency_penalty, b, 4);
  place(l.presence_penalty, b, 4);
  place(l.seed, b, 8);
  place(l.sample_index, b, 4);
  place(l.num_logprobs, b, 4);
  place(l.prompt_lens, b, 4);
  place(l.history, b * d.history_len, 4);
  l.total_bytes = at;
  return l;
}

StepDims step_dims(const ScheduledBatch& batch, const PackOptions& o) {
  MICROLLM_CHECK(!batch.empty(), kOp, "an empty batch has no step inputs");
  StepDims need{batch.num_tokens, batch.num_seqs(), 0, 0};
  for (const ScheduledSeq& e : batch.seqs) {
    need.max_blocks = std::max<int64_t>(need.max_blocks, e.seq->block_table.size());
    need.history_len = std::max(need.history_len, history_needed(e));
  }
  const auto raise = [](int64_t needed, int64_t option, int64_t unset, const char* what) {
    if (option == unset) return needed;
    MICROLLM_CHECK(option >= needed, kOp, what, " ", option, " is below the batch's ", needed);
    return option;
  };
  return {raise(need.num_tokens, o.padded_num_tokens, 0, "padded_num_tokens"),
          raise(need.num_seqs, o.padded_num_seqs, 0, "padded_num_seqs"),
          raise(need.max_blocks, o.max_blocks, 0, "max_blocks"),
          raise(need.history_len, o.history_len, -1, "history_len")};
}

StepArrays step_arrays(const StepLayout& l, std::span<std::byte> buffer) {
  MICROLLM_CHECK(static_cast<int64_t>(buffer.size()) >= l.total_bytes, kOp, "the buffer has ",
                 buffer.size(), " bytes, the layout needs ", l.total_bytes);
  MICROLLM_CHECK(reinterpret_cast<uintptr_t>(buffer.data()) % 8 == 0, kOp,
                 "the buffer must start 8-byte aligned");
  const int64_t n = l.dims.num_tokens, b = l.dims.num_seqs;
  StepArrays a;
  a.token_ids = view<int32_t>(buffer, l.token_ids, n);
  a.positions = view<int32_t>(buffer, l.positions, n);
  a.slot_mapping = view<int32_t>(buffer, l.slot_mapping, n);
  a.query_starts = view<int32_t>(buffer, l.query_starts, b + 1);
  a.seq_lens = view<int32_t>(buffer, l.seq_lens, b);
  a.block_tables = view<int32_t>(buffer, l.block_tables, b * l.dims.max_blocks);
  a.last_rows = view<int32_t>(buffer, l.last_rows, b);
  a.temperature = view<float>(buffer, l.temperature, b);
  a.top_k = view<int32_t>(buffer, l.top_k, b);
  a.top_p = view<float>(buffer, l.top_p, b);
  a.min_p = view<float>(buffer, l.min_p, b);
  a.repetition_penalty = view<float>(buffer, l.repetition_penalty, b);
  a.frequency_penalty = view<float>(buffer, l.frequency_penalty, b);
  a.presence_penalty = view<float>(buffer, l.presence_penalty, b);
  a.seed = view<uint64_t>(buffer, l.seed, b);
  a.sample_index = view<int32_t>(buffer, l.sample_index, b);
  a.num_logprobs = view<int32_t>(buffer, l.num_logprobs, b);
  a.prompt_lens = view<int32_t>(buffer, l.prompt_lens, b);
  a.history = view<int32_t>(buffer, l.history, b * l.dims.history_len);
  return a;
}

void pack_step(const ScheduledBatch& batch, int32_t block_size, const StepLayout& l,
               std::span<std::byte> buffer) {
  MICROLLM_CHECK(block_size >= 1, kOp, "block_size must be >= 1, got ", block_size);
  const StepDims need = step_dims(batch);
  const StepDims& d = l.dims;
  MICROLLM_CHECK(d.num_tokens >= need.num_tokens && d.num_seqs >= need.num_seqs &&
                     d.max_blocks >= need.max_blocks && d.history_len >= need.history_len,
                 kOp, "the layout (N ", d.num_tokens, ", B ", d.num_seqs, ", M ", d.max_blocks,
                 ", L ", d.history_len, ") is smaller than the batch needs (N ", need.num_tokens,
                 ", B ", need.num_seqs, ", M ", need.max_blocks, ", L ", need.history_len, ")");
  StepArrays a = step_arrays(l, buffer);
  const int64_t m = d.max_blocks, hl = d.history_len;
  // Padding values first; real rows overwrite them.
  std::fill(a.token_ids.begin(), a.token_ids.end(), 0);
  std::fill(a.positions.begin(), a.positions.end(), 0);
  std::fill(a.slot_mapping.begin(), a.slot_mapping.end(), -1);
  std::fill(a.query_starts.begin(), a.query_starts.end(), static_cast<int32_t>(need.num_tokens));
  std::fill(a.seq_lens.begin(), a.seq_lens.end(), 0);
  std::fill(a.block_tables.begin(), a.block_tables.end(), -1);
  std::fill(a.last_rows.begin(), a.last_rows.end(), 0);
  SamplingParams neutral;  // greedy, every filter and penalty off
  neutral.temperature = 0.0f;
  std::fill(a.temperature.begin(), a.temperature.end(), neutral.temperature);
  std::fill(a.top_k.begin(), a.top_k.end(), neutral.top_k);
  std::fill(a.top_p.begin(), a.top_p.end(), neutral.top_p);
  std::fill(a.min_p.begin(), a.min_p.end(), neutral.min_p);
  std::fill(a.repetition_penalty.begin(), a.repetition_penalty.end(), neutral.repetition_penalty);
  std::fill(a.frequency_penalty.begin(), a.frequency_penalty.end(), neutral.frequency_penalty);
  std::fill(a.presence_penalty.begin(), a.presence_penalty.end(), neutral.presence_penalty);
  std::fill(a.seed.begin(), a.seed.end(), uint64_t{0});
  std::fill(a.sample_index.begin(), a.sample_index.end(), 0);
  std::fill(a.num_logprobs.begin(), a.num_logprobs.end(), -1);
  std::fill(a.prompt_lens.begin(), a.prompt_lens.end(), 0);
  std::fill(a.history.begin(), a.history.end(), -1);

  int32_t row = 0;
  for (size_t b = 0; b < batch.seqs.size(); ++b) {
    const ScheduledSeq& e = batch.seqs[b];
    const Sequence& s = *e.seq;
    const int64_t end = e.start_position + e.num_new_tokens;
    const auto& table = s.block_table;
    MICROLLM_CHECK(e.num_new_tokens >= 1 && e.start_position >= 0 && end <= s.num_tokens() &&
                       static_cast<int64_t>(table.size()) >= ceil_div(end, block_size),
                   kOp, "sequence ", s.id, ": tokens [", e.start_position, ", ", end, ") of ",
                   s.num_tokens(), " need ", ceil_div(end, block_size), " blocks of ", block_size,
                   ", it holds ", table.size());
    a.query_starts[b] = row;
    for (int64_t pos = e.start_position; pos < end; ++pos, ++row) {
      a.token_ids[row] = s.token(pos);
      a.positions[row] = static_cast<int32_t>(pos);
      a.slot_mapping[row] = table[static_cast<size_t>(pos / block_size)] * block_size +
                            static_cast<int32_t>(pos % block_size);
    }
    a.seq_lens[b] = static_cast<int32_t>(end);
    std::copy(table.begin(), table.end(), a.block_tables.begin() + static_cast<int64_t>(b) * m);
    a.last_rows[b] = row - 1;
    const SamplingParams& p = s.params;
    a.temperature[b] = p.temperature;
    a.top_k[b] = p.top_k;
    a.top_p[b] = p.top_p;
    a.min_p[b] = p.min_p;
    a.repetition_penalty[b] = p.repetition_penalty;
    a.frequency_penalty[b] = p.frequency_penalty;
    a.presence_penalty[b] = p.presence_penalty;
    a.seed[b] = p.seed;
    a.sample_index[b] = static_cast<int32_t>(s.num_output_tokens());
    a.num_logprobs[b] = p.logprobs;
    a.prompt_lens[b] = static_cast<int32_t>(s.num_prompt_tokens());
    if (history_needed(e) > 0) {
      const auto out = a.history.begin() + static_cast<int64_t>(b) * hl;
      std::copy(s.prompt_ids.begin(), s.prompt_ids.end(), out);
      std::copy(s.output_ids.begin(), s.output_ids.end(), out + s.num_prompt_tokens());
    }
  }
  a.query_starts[batch.seqs.size()] = row;
}

StepInputs StepInputs::pack(const ScheduledBatch& batch, int32_t block_size,
                            const PackOptions& options) {
  StepInputs in;
  in.layout_ = step_layout(step_dims(batch, options));
  in.bytes_.assign(static_cast<size_t>(in.layout_.total_bytes), std::byte{0});
  pack_step(batch, block_size, in.layout_, {in.bytes_.data(), in.bytes_.size()});
  return in;
}

}  // namespace microllm::infer
