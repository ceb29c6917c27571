// CUDA sampling operators against the CPU reference: the same greedy and seeded ids, the same
// kept sets and probabilities bit for bit (both run sampling_math.h on integer masses), for
// F32 logits and for BF16 logits (the CPU reading the same BF16 values); tie-heavy rows at
// the top-k and top-p boundaries; a real vocabulary (151,936) at B = 1, 8 and 64 and odd
// vocabularies; logprobs within 1e-5 with the same top ids; and no allocation, copy or
// synchronization across calls after warm-up.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "cuda/cuda_test_utils.h"
#include "microllm/cuda/allocator.h"
#include "microllm/cuda/runtime.h"
#include "microllm/ops/penalties.h"
#include "microllm/ops/sampling.h"
#include "ops/sampling/sampling_test_util.h"
#include "support/scoped_env.h"

using namespace microllm;
using namespace microllm::testing::sampling;

namespace {

const Device kGpu = Device::cuda(0);
const Device kCpu = Device::cpu();
constexpr int64_t kVocab = 151936;

// A mix of every filter, greedy rows and ties, for row b.
RowSpec mixed_row(int64_t b, int64_t position) {
  static const RowSpec kinds[] = {
      {1.0f},
      {0.0f},
      {0.7f, 50},
      {1.0f, 0, 0.9f},
      {1.2f, 0, 1.0f, 0.05f},
      {0.8f, 40, 0.95f, 0.02f},
      {1.0f, 1},
      {1.5f, 0, 1e-3f},
      {0.6f, 1000, 0.5f, 0.0f},
      {2.0f, 3, 1.0f, 0.5f},
      {1.0f, 0, 0.999f},
      {0.9f, 7, 0.3f, 0.1f},
  };
  RowSpec r = kinds[b % 12];
  r.seed = 1000003 * b + 17;
  r.position = position + b;
  return r;
}

// (B, V) logits; `ties` rounds them to multiples of 0.25 so equal values meet every boundary.
Tensor test_logits(int64_t batch, int64_t vocab, uint64_t seed, bool ties) {
  Tensor logits = random_logits(batch, vocab, seed, 3.0);
  if (!ties) return logits;
  std::vector<float> v = logits.to_vector_f32();
  for (float& x : v) x = std::round(x * 4.0f) / 4.0f;
  return Tensor::from_vector(v, {batch, vocab});
}

struct Outputs {
  std::vector<int64_t> ids;
  std::vector<float> scores, probs;
};

Outputs run(const Tensor& logits, const std::vector<RowSpec>& rows, Device device) {
  const Tensor on = logits.to(device);
  const int64_t b = logits.size(0), v = logits.size(1);
  const ops::SamplingTensors p = make_params(rows, device);
  const Tensor ws = workspace_for(b, v, device);
  Tensor ids = Tensor::empty({b}, DType::I32, device);
  Tensor scores = Tensor::empty({b, v}, DType::F32, device);
  Tensor probs = Tensor::empty({b, v}, DType::F32, device);
  ops::sample(on, p, ids, ws);
  ops::sampling_distribution(on, p, scores, probs, ws);
  return {ids.to_vector_i64(), scores.to_vector_f32(), probs.to_vector_f32()};
}

int64_t count_differences(const std::vector<float>& a, const std::vector<float>& b) {
  int64_t n = 0;
  for (size_t i = 0; i < a.size(); ++i)
    n += !(a[i] == b[i] || (std::isnan(a[i]) && std::isnan(b[i])));
  return n;
}

void expect_cuda_equals_cpu(int64_t batch, int64_t vocab, bool ties, DType dtype, uint64_t seed) {
  SCOPED_TRACE(::testing::Message()
               << "B " << batch << " V " << vocab << " ties " << ties << " " << dtype_name(dtype));
  const Tensor logits = test_logits(batch, vocab, seed, ties).to(dtype);
  std::vector<RowSpec> rows;
  for (int64_t b = 0; b < batch; ++b) rows.push_back(mixed_row(b, 40 * static_cast<int64_t>(seed)));
  const Outputs cpu = run(logits, rows, kCpu), gpu = run(logits, rows, kGpu);
  EXPECT_EQ(gpu.ids, cpu.ids);
  EXPECT_EQ(count_differences(gpu.scores, cpu.scores), 0);
  EXPECT_EQ(count_differences(gpu.probs, cpu.probs), 0);
}

}  // namespace

TEST(SamplingCuda, EqualsCpuOnARealVocabulary) {
  MICROLLM_REQUIRE_CUDA();
  for (int64_t batch : {1, 8, 64})
    for (DType dtype : {DType::F32, DType::BF16})
      expect_cuda_equals_cpu(batch, kVocab, false, dtype, 3 + batch);
  expect_cuda_equals_cpu(24, kVocab, true, DType::F32, 5);
}

TEST(SamplingCuda, EqualsCpuOnOddVocabulariesAndTies) {
  MICROLLM_REQUIRE_CUDA();
  // 13 rows of an odd vocabulary: rows start off 16-byte boundaries.
  for (int64_t vocab : {1, 2, 5, 9, 33, 1000, 4095, 4097, 50001})
    for (bool ties : {false, true})
      for (DType dtype : {DType::F32, DType::BF16})
        expect_cuda_equals_cpu(13, vocab, ties, dtype, vocab);
  expect_cuda_equals_cpu(12, 4097, true, DType::BF16, 9);
}

// Greedy rows of `sample` split over blocks (the default) and in one block
// (MICROLLM_SAMPLE_SPLIT=0): the CPU's argmax (lowest id on ties) when the largest value sits in
// several slices, beside NaNs, in rows of −∞ or NaN alone, and next to sampled rows that keep one
// block; a second call on the same workspace gives the same ids (the split leaves its counters
// zero).
TEST(SamplingCuda, GreedyRowsSplitOverBlocksGiveTheCpuArgmax) {
  MICROLLM_REQUIRE_CUDA();
  const float nan = std::nanf(""), inf = INFINITY;
  for (int64_t vocab : {int64_t{5}, int64_t{1025}, int64_t{4097}, kVocab})
    for (int64_t batch : {1, 3, 8, 13, 300})
      for (DType dtype : {DType::F32, DType::BF16}) {
        std::vector<float> v = test_logits(batch, vocab, 7 + vocab + batch, true).to_vector_f32();
        std::vector<RowSpec> rows(static_cast<size_t>(batch));
        for (int64_t b = 0; b < batch; ++b) {
          float* row = v.data() + b * vocab;
          RowSpec& r = rows[static_cast<size_t>(b)];
          r.temperature = b % 5 == 4 ? 1.0f : 0.0f;  // every fifth row sampled
          r.seed = 11 + b, r.position = b;
          switch (b % 5) {
            case 0:  // the largest value at ids in different slices
              for (int64_t i : {vocab - 1, vocab / 2, vocab / 3}) row[i] = 100.0f;
              break;
            case 1:  // NaNs, one where the largest value would be
              for (int64_t i = 0; i < vocab; i += 3) row[i] = nan;
              row[vocab - 1] = 50.0f;
              if (vocab > 3) row[vocab / 3 * 3] = nan;
              break;
            case 2:  // −∞ alone: the lowest id
              std::fill(row, row + vocab, -inf);
              break;
            case 3:  // NaN alone
              std::fill(row, row + vocab, nan);
              break;
            default:
              break;
          }
        }
        const Tensor logits = Tensor::from_vector(v, {batch, vocab}).to(dtype);
        const std::vector<int64_t> want = draw(logits, rows);
        const Tensor on = logits.to(kGpu);
        const ops::SamplingTensors p = make_params(rows, kGpu);
        const Tensor ws = workspace_for(batch, vocab, kGpu);
        for (const char* split : {"1", "0"}) {
          const microllm::testing::ScopedEnv use("MICROLLM_SAMPLE_SPLIT", split);
          for (int call = 0; call < 2; ++call) {
            Tensor ids = Tensor::empty({batch}, DType::I32, kGpu);
            ops::sample(on, p, ids, ws);
            EXPECT_EQ(ids.to_vector_i64(), want)
                << "V " << vocab << " B " << batch << " " << dtype_name(dtype) << " split " << split
                << " call " << call;
          }
        }
      }
}

TEST(SamplingCuda, SeededDrawsAgreeOverManyPositions) {
  MICROLLM_REQUIRE_CUDA();
  // One request, 512 positions in one batch, on both devices.
  const int64_t batch = 512, vocab = 8000;
  const Tensor one = random_logits(1, vocab, 12, 2.0);
  const Tensor logits = one.expand({batch, vocab}).contiguous();
  for (const RowSpec& shape :
       {RowSpec{1.0f}, RowSpec{0.8f, 20, 0.9f}, RowSpec{1.0f, 0, 1.0f, 0.01f}}) {
    std::vector<RowSpec> rows(batch, shape);
    for (int64_t i = 0; i < batch; ++i) rows[i].seed = 77, rows[i].position = i;
    EXPECT_EQ(draw(logits.to(kGpu), rows), draw(logits, rows));
  }
}

TEST(SamplingCuda, LogprobsMatchCpu) {
  MICROLLM_REQUIRE_CUDA();
  for (int64_t vocab : {int64_t{7}, int64_t{4097}, kVocab})
    for (DType dtype : {DType::F32, DType::BF16}) {
      const int64_t batch = 9, n = std::min<int64_t>(20, vocab);
      const Tensor logits = test_logits(batch, vocab, 40 + vocab, vocab == 4097).to(dtype);
      std::vector<int64_t> idv;
      for (int64_t b = 0; b < batch; ++b) idv.push_back((b * 7919) % vocab);
      idv[1] = -1;  // outside [0, V): NaN on both
      auto run_lp = [&](Device d) {
        Tensor ids = Tensor::from_vector(idv, {batch}, DType::I32, d);
        Tensor out = Tensor::empty({batch}, DType::F32, d);
        Tensor top_ids = Tensor::empty({batch, n}, DType::I32, d);
        Tensor top_lp = Tensor::empty({batch, n}, DType::F32, d);
        ops::logprobs(logits.to(d), ids, out, top_ids, top_lp);
        return std::make_tuple(out.to(kCpu), top_ids.to_vector_i64(), top_lp.to(kCpu));
      };
      const auto [cpu_lp, cpu_ids, cpu_top] = run_lp(kCpu);
      const auto [gpu_lp, gpu_ids, gpu_top] = run_lp(kGpu);
      EXPECT_LE(microllm::testing::tolerance_ratio(gpu_lp, cpu_lp, 1e-5, 0.0), 1.0)
          << "V " << vocab << " " << dtype_name(dtype);
      EXPECT_LE(microllm::testing::tolerance_ratio(gpu_top, cpu_top, 1e-5, 0.0), 1.0);
      EXPECT_EQ(gpu_ids, cpu_ids);
    }
}

TEST(SamplingCuda, LogprobsMatchCpuWithMaskedEntries) {
  MICROLLM_REQUIRE_CUDA();
  // −∞ logits (masked tokens) add nothing to the sum; also a row whose largest entries come
  // last and one with a single finite entry.
  const int64_t batch = 4, vocab = kVocab;
  std::vector<float> v = random_logits(batch, vocab, 21, 3.0).to_vector_f32();
  for (int64_t i = 0; i < vocab; i += 3) v[i] = -INFINITY;                        // row 0
  for (int64_t i = 0; i < vocab; ++i) v[vocab + i] = -20.0f + 40.0f * i / vocab;  // row 1
  for (int64_t i = 0; i < vocab; ++i) v[2 * vocab + i] = i == 4321 ? 1.5f : -INFINITY;
  for (DType dtype : {DType::F32, DType::BF16}) {
    const Tensor logits = Tensor::from_vector(v, {batch, vocab}).to(dtype);
    auto run_lp = [&](Device d) {
      Tensor ids =
          Tensor::from_vector(std::vector<int64_t>{1, vocab - 1, 4321, 77}, {batch}, DType::I32, d);
      Tensor out = Tensor::empty({batch}, DType::F32, d);
      ops::logprobs(logits.to(d), ids, out, Tensor(), Tensor());
      return out.to(kCpu);
    };
    const Tensor cpu = run_lp(kCpu), gpu = run_lp(kGpu);
    EXPECT_LE(microllm::testing::tolerance_ratio(gpu, cpu, 1e-5, 0.0), 1.0) << dtype_name(dtype);
    EXPECT_EQ(gpu.to_vector_f32()[2], 0.0f);  // the one finite entry has probability 1
  }
}

TEST(SamplingCuda, LogprobsOfARowDoNotDependOnItsPlaceInTheBatch) {
  MICROLLM_REQUIRE_CUDA();
  // Odd vocabularies put the rows of a batch at addresses of every alignment; a row's
  // log-probabilities are the same bits alone and at each place.
  for (int64_t vocab : {int64_t{4097}, int64_t{1001}, kVocab})
    for (DType dtype : {DType::F32, DType::BF16}) {
      const int64_t batch = 9;
      const std::vector<float> all = random_logits(batch, vocab, 70 + vocab, 3.0).to_vector_f32();
      const auto run_lp = [&](const std::vector<float>& values, int64_t rows) {
        const Tensor logits = Tensor::from_vector(values, {rows, vocab}).to(dtype).to(kGpu);
        std::vector<int64_t> idv(static_cast<size_t>(rows));
        for (int64_t b = 0; b < rows; ++b) idv[b] = (b * 7919 + 3) % vocab;
        Tensor ids = Tensor::from_vector(idv, {rows}, DType::I32, kGpu);
        Tensor out = Tensor::empty({rows}, DType::F32, kGpu);
        Tensor top_ids = Tensor::empty({rows, 5}, DType::I32, kGpu);
        Tensor top_lp = Tensor::empty({rows, 5}, DType::F32, kGpu);
        ops::logprobs(logits, ids, out, top_ids, top_lp);
        return std::make_pair(out.to_vector_f32(), top_lp.to_vector_f32());
      };
      const auto together = run_lp(all, batch);
      for (int64_t b = 0; b < batch; ++b) {
        // Row b alone, with the id it had in the batch (row 0 of a one-row call gets id 3).
        std::vector<float> row(all.begin() + b * vocab, all.begin() + (b + 1) * vocab);
        std::vector<float> padded(static_cast<size_t>((b + 1) * vocab), 0.0f);
        std::copy(row.begin(), row.end(), padded.begin() + b * vocab);
        const auto alone = run_lp(padded, b + 1);  // the same id: row b of b + 1 rows
        const auto first = run_lp(row, 1);         // at the aligned start of its own buffer
        EXPECT_EQ(alone.first[b], together.first[b]) << "V " << vocab << " row " << b;
        for (int64_t r = 0; r < 5; ++r)
          EXPECT_EQ(first.second[r], together.second[b * 5 + r])
              << "V " << vocab << " " << dtype_name(dtype) << " row " << b;
      }
    }
}

TEST(SamplingCuda, NoAllocationOrTransferAfterWarmUp) {
  MICROLLM_REQUIRE_CUDA();
  const int64_t batch = 64, length = 300;
  const Tensor logits = test_logits(batch, kVocab, 3, false).to(kGpu);
  std::vector<RowSpec> rows;
  for (int64_t b = 0; b < batch; ++b) rows.push_back(mixed_row(b, 0));
  const ops::SamplingTensors p = make_params(rows, kGpu);
  const Tensor ws = workspace_for(batch, kVocab, kGpu);
  Tensor work = Tensor::empty({batch, kVocab}, DType::F32, kGpu);
  Tensor ids = Tensor::empty({batch}, DType::I32, kGpu);
  Tensor scores = Tensor::empty({batch, kVocab}, DType::F32, kGpu);
  Tensor probs = Tensor::empty({batch, kVocab}, DType::F32, kGpu);
  Tensor lp = Tensor::empty({batch}, DType::F32, kGpu);
  Tensor top_ids = Tensor::empty({batch, 20}, DType::I32, kGpu);
  Tensor top_lp = Tensor::empty({batch, 20}, DType::F32, kGpu);
  Tensor history = Tensor::zeros({batch, length}, DType::I32, kGpu);
  Tensor prompt_lens = Tensor::full({batch}, 100, DType::I32, kGpu);
  ops::PenaltyTensors pen{Tensor::full({batch}, 1.2, DType::F32, kGpu),
                          Tensor::full({batch}, 0.5, DType::F32, kGpu),
                          Tensor::full({batch}, 0.5, DType::F32, kGpu)};
  Tensor pen_ws = Tensor::empty(
      {static_cast<int64_t>(ops::penalties_workspace_bytes(batch, length))}, DType::U8, kGpu);
  auto sample_step = [&] {
    ops::apply_penalties(work, history, prompt_lens, pen, pen_ws);
    ops::sample(work, p, ids, ws);
    ops::sampling_distribution(work, p, scores, probs, ws);
    ops::logprobs(logits, ids, lp, top_ids, top_lp);
  };
  work.copy_from(logits);
  sample_step();  // warm-up
  cuda::synchronize(cuda::current_stream(kGpu));
  const cuda::AllocatorStats before = cuda::allocator_stats(kGpu);
  cuda::reset_transfer_stats();
  for (int i = 0; i < 3; ++i) sample_step();
  const cuda::TransferStats t = cuda::transfer_stats();
  const cuda::AllocatorStats after = cuda::allocator_stats(kGpu);
  EXPECT_EQ(after.allocations, before.allocations);
  EXPECT_EQ(after.backend_mallocs, before.backend_mallocs);
  EXPECT_EQ(t.h2d_calls + t.d2h_calls + t.d2d_calls, 0);
  EXPECT_EQ(t.host_synchronizations, 0);
}

TEST(SamplingCuda, SeededDrawsDoNotDependOnTheBatch) {
  MICROLLM_REQUIRE_CUDA();
  // The request at row 0 of a batch of 1 and at row 5 of a batch of 8, on the device.
  const Tensor mine = random_logits(1, kVocab, 8, 2.0);
  std::vector<float> all = random_logits(8, kVocab, 9, 3.0).to_vector_f32();
  const std::vector<float> row = row_of(mine, 0);
  std::copy(row.begin(), row.end(), all.begin() + 5 * kVocab);
  const Tensor batch = Tensor::from_vector(all, {8, kVocab}, DType::F32, kGpu);
  const Tensor alone_logits = mine.to(kGpu);
  std::vector<int64_t> alone, shared;
  for (int64_t pos = 0; pos < 64; ++pos) {
    const RowSpec r{0.9f, 50, 0.95f, 0.01f, 0x5eed, pos};
    alone.push_back(draw(alone_logits, {r})[0]);
    std::vector<RowSpec> rows;
    for (int64_t b = 0; b < 8; ++b) rows.push_back(mixed_row(b, pos));
    rows[5] = r;
    shared.push_back(draw(batch, rows)[5]);
  }
  EXPECT_EQ(alone, shared);
}

TEST(SamplingCuda, RejectsOperandsOnAnotherDevice) {
  MICROLLM_REQUIRE_CUDA();
  const Tensor logits = random_logits(2, 10, 1).to(kGpu);
  Tensor ids = Tensor::empty({2}, DType::I32, kGpu);
  EXPECT_THROW(
      {
        try {
          ops::sample(logits, make_params({{}, {}}, kCpu), ids, Tensor());
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("'temperature' must be on cuda:0"),
                    std::string::npos)
              << e.what();
          throw;
        }
      },
      Error);
}
