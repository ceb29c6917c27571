// CPU apply_penalties (ops/penalties.h) against a naive reference written from the
// definitions: transformers' repetition penalty over the distinct ids of prompt + generated
// (negative logits multiplied, others divided, once per id), then vLLM's frequency and
// presence penalties over the generated ids (l − f·count, then − presence). Also −1
// padding, ids outside the vocabulary, repeated ids, empty histories, and the error paths.
// The PyTorch oracle is test_penalties_oracle.py.
#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <set>
#include <vector>

#include "core/expect_error.h"
#include "microllm/core/random.h"
#include "microllm/ops/penalties.h"

using namespace microllm;
using microllm::testing::throws_error;

namespace {

struct PenaltyRow {
  std::vector<int64_t> history;  // prompt then generated; −1 padding allowed anywhere
  int64_t prompt_len;
  float repetition, frequency, presence;
};

// The naive reference, in F32 steps as the definitions read.
std::vector<float> reference(std::vector<float> logits, int64_t vocab,
                             const std::vector<PenaltyRow>& rows) {
  for (size_t b = 0; b < rows.size(); ++b) {
    const PenaltyRow& r = rows[b];
    float* row = logits.data() + b * vocab;
    std::set<int64_t> seen;
    std::map<int64_t, int64_t> generated;
    for (size_t j = 0; j < r.history.size(); ++j) {
      const int64_t id = r.history[j];
      if (id < 0 || id >= vocab) continue;
      seen.insert(id);
      if (static_cast<int64_t>(j) >= r.prompt_len) ++generated[id];
    }
    for (int64_t id : seen) row[id] = row[id] < 0 ? row[id] * r.repetition : row[id] / r.repetition;
    for (auto [id, count] : generated) {
      const float by_count = r.frequency * static_cast<float>(count);
      row[id] = row[id] - by_count;
      row[id] = row[id] - r.presence;
    }
  }
  return logits;
}

struct Inputs {
  Tensor logits, history, prompt_lens;
  ops::PenaltyTensors penalties;
  Tensor workspace;
};

Inputs make_inputs(const Tensor& logits, const std::vector<PenaltyRow>& rows, int64_t length) {
  const int64_t b = logits.size(0);
  std::vector<int64_t> history(b * length, -1), prompt;
  std::vector<double> rep, freq, pres;
  for (int64_t i = 0; i < b; ++i) {
    for (size_t j = 0; j < rows[i].history.size(); ++j)
      history[i * length + j] = rows[i].history[j];
    prompt.push_back(rows[i].prompt_len);
    rep.push_back(rows[i].repetition);
    freq.push_back(rows[i].frequency);
    pres.push_back(rows[i].presence);
  }
  Inputs in;
  in.logits = logits.clone();
  in.history = Tensor::from_vector(history, {b, length}, DType::I32);
  in.prompt_lens = Tensor::from_vector(prompt, {b}, DType::I32);
  in.penalties = {Tensor::from_vector(rep, {b}), Tensor::from_vector(freq, {b}),
                  Tensor::from_vector(pres, {b})};
  const size_t bytes = ops::penalties_workspace_bytes(b, length);
  in.workspace = bytes ? Tensor::empty({static_cast<int64_t>(bytes)}, DType::U8) : Tensor();
  return in;
}

}  // namespace

TEST(Penalties, MatchTheDefinitions) {
  const int64_t vocab = 50;
  Generator gen(3);
  const Tensor logits = randn({6, vocab}, gen, DType::F32, Device::cpu(), 0.0, 3.0);
  const std::vector<PenaltyRow> rows = {
      {{1, 2, 3, 2, 7, 2, 7, 9}, 3, 1.3f, 0.5f, 0.25f},  // repeats in prompt and output
      {{4, 4, 4, 4}, 0, 0.7f, -0.4f, 1.0f},              // all generated; a reward (< 1)
      {{5, 6, -1, 5, -1}, 5, 1.5f, 2.0f, 2.0f},          // all prompt: repetition only
      {{}, 0, 2.0f, 1.0f, 1.0f},                         // empty history: unchanged
      {{0, 49, 50, 99, -7, 0}, 2, 1.1f, 0.1f, 0.0f},     // ids outside [0, V) skipped
      {{8, 9, 10, 8, 9, 10, 11}, 4, 1.0f, 0.0f, 0.0f},   // every penalty off
  };
  Inputs in = make_inputs(logits, rows, 9);
  ops::apply_penalties(in.logits, in.history, in.prompt_lens, in.penalties, in.workspace);
  const std::vector<float> want = reference(logits.to_vector_f32(), vocab, rows);
  EXPECT_EQ(in.logits.to_vector_f32(), want);
  // Row 5: penalties off leave the row bit for bit; row 3: nothing to penalize.
  const std::vector<float> before = logits.to_vector_f32(), got = in.logits.to_vector_f32();
  for (int64_t i = 0; i < vocab; ++i) {
    EXPECT_EQ(got[5 * vocab + i], before[5 * vocab + i]);
    EXPECT_EQ(got[3 * vocab + i], before[3 * vocab + i]);
  }
}

TEST(Penalties, LongHistoriesOverAVocabulary) {
  const int64_t vocab = 5000, length = 777, batch = 4;
  Generator gen(8);
  const Tensor logits = randn({batch, vocab}, gen, DType::F32, Device::cpu(), 0.0, 4.0);
  std::vector<PenaltyRow> rows;
  for (int64_t b = 0; b < batch; ++b) {
    PenaltyRow r{{}, 100 * b, 1.0f + 0.2f * b, 0.3f * b, 0.5f};
    for (int64_t j = 0; j < length - 50 * b; ++j)
      r.history.push_back(static_cast<int64_t>(gen.next_u64() % (b == 3 ? 20 : vocab)));
    rows.push_back(r);
  }
  Inputs in = make_inputs(logits, rows, length);
  ops::apply_penalties(in.logits, in.history, in.prompt_lens, in.penalties, in.workspace);
  EXPECT_EQ(in.logits.to_vector_f32(), reference(logits.to_vector_f32(), vocab, rows));
}

TEST(Penalties, WorkspaceBytesAreAPowerOfTwoPerRow) {
  EXPECT_EQ(ops::penalties_workspace_bytes(3, 0), 0u);
  EXPECT_EQ(ops::penalties_workspace_bytes(3, 1), 12u);
  EXPECT_EQ(ops::penalties_workspace_bytes(3, 5), 3u * 8u * 4u);
  EXPECT_EQ(ops::penalties_workspace_bytes(2, 1024), 2u * 1024u * 4u);
  EXPECT_TRUE(throws_error([] { ops::penalties_workspace_bytes(-1, 3); },
                           "penalties_workspace_bytes", {"-1"}));
}

TEST(Penalties, RejectBadShapesAndDtypes) {
  const std::vector<PenaltyRow> rows = {{{1, 2}, 1, 1.2f, 0.1f, 0.1f}, {{3}, 0, 1.2f, 0.1f, 0.1f}};
  Inputs in = make_inputs(Tensor::zeros({2, 10}), rows, 4);
  auto call = [&](const Tensor& logits, const Tensor& history, const Tensor& prompt,
                  const ops::PenaltyTensors& p,
                  const Tensor& ws) { ops::apply_penalties(logits, history, prompt, p, ws); };
  EXPECT_NO_THROW(call(in.logits, in.history, in.prompt_lens, in.penalties, in.workspace));
  EXPECT_TRUE(throws_error(
      [&] {
        call(in.logits.to(DType::BF16), in.history, in.prompt_lens, in.penalties, in.workspace);
      },
      "apply_penalties", {"'logits' must be f32(2, 10)", "bf16"}));
  EXPECT_TRUE(throws_error(
      [&] {
        call(in.logits, in.history.to(DType::I64), in.prompt_lens, in.penalties, in.workspace);
      },
      "apply_penalties", {"'history' must be i32(2, 4)", "i64"}));
  EXPECT_TRUE(throws_error(
      [&] {
        call(in.logits, in.history.slice(0, 0, 1), in.prompt_lens, in.penalties, in.workspace);
      },
      "apply_penalties", {"'history' must be i32(2, 4)", "(1, 4)"}));
  EXPECT_TRUE(throws_error(
      [&] {
        call(in.logits, in.history, Tensor::zeros({3}, DType::I32), in.penalties, in.workspace);
      },
      "apply_penalties", {"'prompt_lens' must be i32(2,)"}));
  ops::PenaltyTensors p = in.penalties;
  p.presence = Tensor::zeros({2}, DType::F64);
  EXPECT_TRUE(throws_error([&] { call(in.logits, in.history, in.prompt_lens, p, in.workspace); },
                           "apply_penalties", {"'presence' must be f32(2,)", "f64"}));
  p = in.penalties;
  p.repetition = Tensor();
  EXPECT_TRUE(throws_error([&] { call(in.logits, in.history, in.prompt_lens, p, in.workspace); },
                           "apply_penalties", {"'repetition' is undefined"}));
  EXPECT_TRUE(throws_error(
      [&] {
        call(in.logits, in.history, in.prompt_lens, in.penalties, Tensor::empty({31}, DType::U8));
      },
      "apply_penalties", {"at least 32 bytes"}));
  EXPECT_TRUE(throws_error(
      [&] {
        call(in.logits.transpose(0, 1), in.history, in.prompt_lens, in.penalties, in.workspace);
      },
      "apply_penalties", {"'logits' must be dense", "strides (1, 10)"}));
}
