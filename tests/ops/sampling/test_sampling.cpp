// CPU sampling operators (ops/sampling.h): greedy = argmax (lowest id on ties), every
// filter's kept set and renormalized distribution against a naive F64 reference, the tie
// rules at the top-k and top-p boundaries, chi-square goodness of fit of 20,000 seeded draws
// per kept-set shape, batch invariance of seeded draws, logprobs against an F64
// log-softmax, the sampler's exp, counter_random, and every error path. The PyTorch oracle
// (transformers' processors written out in torch) is test_sampling_oracle.py.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "../../../src/ops/sampling/sampling_math.h"
#include "core/expect_error.h"
#include "microllm/core/counter_rng.h"
#include "microllm/core/float_convert.h"
#include "microllm/ops/sampling.h"
#include "ops/sampling/chi_square.h"
#include "ops/sampling/sampling_test_util.h"

using namespace microllm;
using namespace microllm::testing::sampling;
using microllm::testing::throws_error;

namespace {

const Device kCpu = Device::cpu();

struct Distribution {
  std::vector<float> scores, probs;  // (B·V)
};

Distribution distribution(const Tensor& logits, const std::vector<RowSpec>& rows) {
  const int64_t b = logits.size(0), v = logits.size(1);
  Tensor scores = Tensor::empty({b, v}, DType::F32, logits.device());
  Tensor probs = Tensor::empty({b, v}, DType::F32, logits.device());
  ops::sampling_distribution(logits, make_params(rows, logits.device()), scores, probs,
                             workspace_for(b, v, logits.device()));
  return {scores.to_vector_f32(), probs.to_vector_f32()};
}

// The kept set and probabilities of row b agree with the naive reference.
::testing::AssertionResult matches_reference(const Tensor& logits, const Distribution& d, int64_t b,
                                             const RowSpec& spec) {
  const int64_t v = logits.size(1);
  const std::vector<float> row = row_of(logits, b);
  const Reference ref = reference_row(row, spec);
  int64_t kept = 0;
  for (int64_t i = 0; i < v; ++i) {
    const bool got_kept = d.scores[b * v + i] != -INFINITY;
    if (got_kept != ref.kept[i])
      return ::testing::AssertionFailure()
             << "row " << b << " id " << i << " kept " << got_kept << ", reference " << ref.kept[i];
    if (std::fabs(d.probs[b * v + i] - ref.probs[i]) > 1e-6)
      return ::testing::AssertionFailure() << "row " << b << " id " << i << " prob "
                                           << d.probs[b * v + i] << ", reference " << ref.probs[i];
    if (got_kept && spec.temperature >= ops::kGreedyTemperature &&
        d.scores[b * v + i] != row[i] / spec.temperature)
      return ::testing::AssertionFailure()
             << "row " << b << " id " << i << " score " << d.scores[b * v + i];
    kept += got_kept;
  }
  return ::testing::AssertionSuccess() << kept << " kept";
}

std::vector<int64_t> kept_ids(const Distribution& d, int64_t b, int64_t v) {
  std::vector<int64_t> out;
  for (int64_t i = 0; i < v; ++i)
    if (d.scores[b * v + i] != -INFINITY) out.push_back(i);
  return out;
}

Tensor logits_of(const std::vector<float>& values) {
  return Tensor::from_vector(values, {1, static_cast<int64_t>(values.size())});
}

}  // namespace

TEST(Sampling, GreedyIsArgmaxWithTheLowestIdOnTies) {
  const Tensor logits =
      Tensor::from_vector(std::vector<float>{1, 5, 2, 5, -1,  //
                                             -3, -1, -1, -2, -7, 0, -0.0f, 0, -1, -1},
                          {3, 5});
  const std::vector<RowSpec> rows = {{0.0f}, {0.0f}, {5e-6f, 3, 0.5f}};
  EXPECT_EQ(draw(logits, rows), (std::vector<int64_t>{1, 1, 0}));
  EXPECT_EQ(draw(logits.to(DType::BF16), rows), (std::vector<int64_t>{1, 1, 0}));
  const Distribution d = distribution(logits, rows);
  EXPECT_EQ(kept_ids(d, 0, 5), (std::vector<int64_t>{1}));
  EXPECT_EQ(d.probs[1], 1.0f);
  EXPECT_EQ(d.scores[1], 5.0f);
  // Greedy ignores the seed and the position.
  const Tensor wide = random_logits(4, 3000, 21);
  std::vector<RowSpec> greedy(4, RowSpec{0.0f});
  const std::vector<int64_t> first = draw(wide, greedy);
  for (RowSpec& r : greedy) r.seed = 99, r.position = 1234;
  EXPECT_EQ(draw(wide, greedy), first);
  for (int64_t b = 0; b < 4; ++b) {
    const std::vector<float> row = row_of(wide, b);
    EXPECT_EQ(first[b], std::max_element(row.begin(), row.end()) - row.begin());
  }
}

TEST(Sampling, KeptSetsAndProbabilitiesMatchTheNaiveReference) {
  const std::vector<RowSpec> rows = {
      {1.0f},                     // temperature only: everything kept
      {0.7f, 40},                 // top-k
      {1.3f, 0, 0.9f},            // top-p
      {1.0f, 0, 1.0f, 0.05f},     // min-p
      {0.8f, 200, 0.95f, 0.01f},  // all three
      {2.0f, 7, 0.3f},            // top-k, then a small top-p
      {1.0f, 0, 1e-4f},           // top-p keeps the top token alone
      {1.0f, 1},                  // top-k 1
      {1.0f, 100000},             // top-k beyond V: off
      {0.5f, 0, 1.0f, 1.0f},      // min-p 1: the largest value only
  };
  const Tensor logits = random_logits(static_cast<int64_t>(rows.size()), 1000, 5);
  const Distribution d = distribution(logits, rows);
  for (int64_t b = 0; b < static_cast<int64_t>(rows.size()); ++b)
    EXPECT_TRUE(matches_reference(logits, d, b, rows[b]));
  EXPECT_EQ(kept_ids(d, 6, 1000).size(), 1u);
  EXPECT_EQ(kept_ids(d, 7, 1000).size(), 1u);
  EXPECT_EQ(kept_ids(d, 8, 1000).size(), 1000u);
  // BF16 logits: the same as F32 logits holding the BF16-rounded values.
  const Tensor rounded = logits.to(DType::BF16).to(DType::F32);
  const Distribution from_bf16 = distribution(logits.to(DType::BF16), rows);
  const Distribution from_rounded = distribution(rounded, rows);
  EXPECT_EQ(from_bf16.scores, from_rounded.scores);
  EXPECT_EQ(from_bf16.probs, from_rounded.probs);
}

TEST(Sampling, TopKKeepsEveryTieAtTheBoundary) {
  const Tensor logits = logits_of({3, 2, 1, 2, 2, 0});
  const Distribution d = distribution(logits, {{1.0f, 2}});
  EXPECT_EQ(kept_ids(d, 0, 6), (std::vector<int64_t>{0, 1, 3, 4}));
}

TEST(Sampling, TopPBreaksTiesByKeepingLowerIds) {
  // Four equal values, 1/4 each. A token stays while the mass ranked above it is below
  // top_p; among equal values the lower id ranks higher.
  const Tensor logits = logits_of({1, 1, 1, 1});
  EXPECT_EQ(kept_ids(distribution(logits, {{1.0f, 0, 0.5f}}), 0, 4),
            (std::vector<int64_t>{0, 1}));  // above = 0, 1/4 kept; 1/2 is not < 1/2
  EXPECT_EQ(kept_ids(distribution(logits, {{1.0f, 0, 0.51f}}), 0, 4),
            (std::vector<int64_t>{0, 1, 2}));
  EXPECT_EQ(kept_ids(distribution(logits, {{1.0f, 0, 0.25f}}), 0, 4), (std::vector<int64_t>{0}));
  // A tie group cut in the middle, behind a larger value: 0.5 above, then three ties.
  const Tensor mixed = logits_of({0, std::log(3.0f), 0, 0});  // 3/6, then 1/6 each
  EXPECT_EQ(kept_ids(distribution(mixed, {{1.0f, 0, 0.6f}}), 0, 4), (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(kept_ids(distribution(mixed, {{1.0f, 0, 0.7f}}), 0, 4),
            (std::vector<int64_t>{0, 1, 2}));
}

TEST(Sampling, MinPRemovesTokensBelowAFractionOfTheLargestProbability) {
  // Probabilities proportional to 1, 0.5, 0.2, 0.05.
  const Tensor logits = logits_of({0, std::log(0.5f), std::log(0.2f), std::log(0.05f)});
  EXPECT_EQ(kept_ids(distribution(logits, {{1.0f, 0, 1.0f, 0.1f}}), 0, 4),
            (std::vector<int64_t>{0, 1, 2}));
  EXPECT_EQ(kept_ids(distribution(logits, {{1.0f, 0, 1.0f, 0.3f}}), 0, 4),
            (std::vector<int64_t>{0, 1}));
  // Temperature first: T = 2 turns 0.05 into sqrt(0.05) ≈ 0.22.
  EXPECT_EQ(kept_ids(distribution(logits, {{2.0f, 0, 1.0f, 0.2f}}), 0, 4),
            (std::vector<int64_t>{0, 1, 2, 3}));
}

TEST(Sampling, RowsWithoutAFiniteLargestValueGiveTheArgmax) {
  const float inf = std::numeric_limits<float>::infinity();
  const Tensor logits =
      Tensor::from_vector(std::vector<float>{-inf, -inf, -inf, -inf, 1.0f, inf, 2.0f, inf}, {2, 4});
  EXPECT_EQ(draw(logits, {{1.0f}, {1.0f}}), (std::vector<int64_t>{0, 1}));
  // Masked (−inf) tokens are never drawn.
  const Tensor masked = logits_of({-inf, 0.0f, -inf, 0.0f});
  for (int64_t pos = 0; pos < 50; ++pos) {
    const int64_t id = draw(masked, {{1.0f, 0, 1.0f, 0.0f, 3, pos}})[0];
    EXPECT_TRUE(id == 1 || id == 3) << id;
  }
}

TEST(Sampling, DrawsFollowTheKeptDistribution) {
  // 20,000 draws per kept-set shape, positions 0..19999 of one seed, against the naive
  // reference's probabilities; p-value threshold 1e-4 (the seeds are fixed: deterministic).
  const int64_t vocab = 40, draws = 20000, chunk = 2000;
  const Tensor one = random_logits(1, vocab, 77, 1.5);
  const std::vector<RowSpec> shapes = {
      {1.0f}, {0.7f, 6}, {1.0f, 0, 0.8f}, {1.2f, 0, 1.0f, 0.15f}, {0.9f, 20, 0.9f, 0.02f}};
  const Tensor batch = one.expand({chunk, vocab}).contiguous();
  for (const RowSpec& shape : shapes) {
    const Reference ref = reference_row(row_of(one, 0), shape);
    std::vector<int64_t> counts(vocab, 0);
    for (int64_t start = 0; start < draws; start += chunk) {
      std::vector<RowSpec> rows(chunk, shape);
      for (int64_t i = 0; i < chunk; ++i) rows[i].seed = 2024, rows[i].position = start + i;
      for (int64_t id : draw(batch, rows)) {
        ASSERT_TRUE(ref.kept[id]) << "drew removed id " << id;
        ++counts[id];
      }
    }
    const microllm::testing::ChiSquare chi = microllm::testing::chi_square_test(counts, ref.probs);
    EXPECT_GT(chi.p_value, 1e-4) << "chi2 " << chi.statistic << " dof " << chi.dof << " (top_k "
                                 << shape.top_k << " top_p " << shape.top_p << " min_p "
                                 << shape.min_p << ")";
    EXPECT_GE(chi.dof, 1);
  }
}

TEST(Sampling, ChiSquareTestRejectsAWrongDistribution) {
  // The goodness-of-fit check can fail: draws from one distribution against another.
  const int64_t vocab = 40, chunk = 20000;
  const Tensor one = random_logits(1, vocab, 77, 1.5);
  std::vector<RowSpec> rows(chunk, RowSpec{1.0f});
  for (int64_t i = 0; i < chunk; ++i) rows[i].seed = 5, rows[i].position = i;
  std::vector<int64_t> counts(vocab, 0);
  for (int64_t id : draw(one.expand({chunk, vocab}).contiguous(), rows)) ++counts[id];
  const Reference hotter = reference_row(row_of(one, 0), RowSpec{1.25f});
  EXPECT_LT(microllm::testing::chi_square_test(counts, hotter.probs).p_value, 1e-4);
}

TEST(Sampling, SeededDrawsDoNotDependOnTheBatch) {
  // The same request at row 0 of a batch of 1 and at row 5 of a batch of 8 (other rows have
  // other logits, parameters and seeds) draws the same ids, position after position.
  const int64_t vocab = 1001;
  const Tensor mine = random_logits(1, vocab, 8, 1.0);
  Tensor others = random_logits(8, vocab, 9, 3.0);
  std::vector<float> all = others.to_vector_f32();
  const std::vector<float> row = row_of(mine, 0);
  std::copy(row.begin(), row.end(), all.begin() + 5 * vocab);
  const Tensor batch = Tensor::from_vector(all, {8, vocab});
  const RowSpec request{0.9f, 50, 0.95f, 0.01f, 0x5eed5eed5eedll, 0};
  std::vector<int64_t> alone, shared, distinct;
  for (int64_t pos = 0; pos < 200; ++pos) {
    RowSpec r = request;
    r.position = pos;
    alone.push_back(draw(mine, {r})[0]);
    std::vector<RowSpec> rows;
    for (int64_t b = 0; b < 8; ++b)
      rows.push_back({0.5f + 0.2f * b, int32_t(b), 0.9f, 0.0f, b, pos});
    rows[5] = r;
    shared.push_back(draw(batch, rows)[5]);
    r.seed += 1;
    distinct.push_back(draw(mine, {r})[0]);
  }
  EXPECT_EQ(alone, shared);
  EXPECT_NE(alone, distinct);  // another seed, another sequence
  // I32 positions give the same draws as I64 positions.
  std::vector<RowSpec> rows(8);
  for (int64_t b = 0; b < 8; ++b) rows[b] = {1.0f, 0, 1.0f, 0.0f, 42, 1000 + b};
  EXPECT_EQ(draw(batch, rows, DType::I32), draw(batch, rows, DType::I64));
}

TEST(Sampling, LogprobsAreTheLogSoftmaxOfTheGivenLogits) {
  const int64_t vocab = 1000;
  Tensor logits = random_logits(3, vocab, 31, 3.0);
  std::vector<float> values = logits.to_vector_f32();
  values[2 * vocab + 10] = values[2 * vocab + 500] = 50.0f;  // a tie for the top entry
  values[2 * vocab + 20] = values[2 * vocab + 7] = 40.0f;    // and for the next one
  logits = Tensor::from_vector(values, {3, vocab});
  const int64_t n = 5;
  for (DType dtype : {DType::F32, DType::BF16}) {
    const Tensor given = logits.to(dtype);
    const std::vector<float> v = given.to_vector_f32();
    Tensor ids = Tensor::from_vector(std::vector<int64_t>{3, 999, 500}, {3}, DType::I32);
    Tensor out = Tensor::empty({3}, DType::F32);
    Tensor top_ids = Tensor::empty({3, n}, DType::I32);
    Tensor top_lp = Tensor::empty({3, n}, DType::F32);
    ops::logprobs(given, ids, out, top_ids, top_lp);
    const std::vector<int64_t> got_ids = top_ids.to_vector_i64();
    const std::vector<float> got_lp = top_lp.to_vector_f32(), got = out.to_vector_f32();
    for (int64_t b = 0; b < 3; ++b) {
      double m = -INFINITY, s = 0.0;
      for (int64_t i = 0; i < vocab; ++i) m = std::max(m, double(v[b * vocab + i]));
      for (int64_t i = 0; i < vocab; ++i) s += std::exp(double(v[b * vocab + i]) - m);
      const double lse = m + std::log(s);
      const int64_t id = ids.to_vector_i64()[b];
      EXPECT_NEAR(got[b], v[b * vocab + id] - lse, 1e-5);
      std::vector<int64_t> order(vocab);
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(),
                       [&](int64_t a, int64_t c) { return v[b * vocab + a] > v[b * vocab + c]; });
      for (int64_t r = 0; r < n; ++r) {
        EXPECT_EQ(got_ids[b * n + r], order[r]) << "row " << b << " rank " << r;
        EXPECT_NEAR(got_lp[b * n + r], v[b * vocab + order[r]] - lse, 1e-5);
      }
    }
    EXPECT_EQ(got_ids[2 * n + 0], 10);
    EXPECT_EQ(got_ids[2 * n + 1], 500);
    EXPECT_EQ(got_ids[2 * n + 2], 7);
    EXPECT_EQ(got_ids[2 * n + 3], 20);
  }
  // N = 0: the top tensors may be left out; an id outside [0, V) gives NaN.
  Tensor out = Tensor::empty({1}, DType::F32);
  ops::logprobs(logits_of({1, 2, 3}), Tensor::from_vector(std::vector<int64_t>{3}, {1}, DType::I32),
                out, Tensor(), Tensor());
  EXPECT_TRUE(std::isnan(out.item()));
}

TEST(Sampling, ExpMatchesTheLibraryWithinTwoUlp) {
  using ops::sampling_math::exp_nonpositive;
  EXPECT_EQ(exp_nonpositive(0.0f), 1.0f);
  EXPECT_EQ(exp_nonpositive(-INFINITY), 0.0f);
  EXPECT_EQ(exp_nonpositive(std::numeric_limits<float>::quiet_NaN()), 0.0f);
  EXPECT_EQ(exp_nonpositive(-86.6f), 0.0f);
  EXPECT_GE(exp_nonpositive(-86.5f), 0x1p-126f);  // the smallest nonzero result is normal
  int64_t checked = 0;
  auto check = [&](float d) {
    const double want = std::exp(static_cast<double>(d));
    const float got = exp_nonpositive(d);
    const double ulp = std::nextafter(static_cast<float>(want), 2.0f) - static_cast<float>(want);
    ++checked;
    return std::fabs(got - want) <= 2.0 * ulp;
  };
  // Steps of 1e-4 over [-86.5, -1e-3], then geometric steps towards 0, then every float of
  // [-1, -0.5] (where the reduction's k changes from -1 to 0).
  for (float d = -86.5f; d < -1e-3f; d += 1e-4f) ASSERT_TRUE(check(d)) << "d = " << d;
  for (float d = -1e-3f; d < -1e-30f; d *= 0.99f) ASSERT_TRUE(check(d)) << "d = " << d;
  for (float d = -1.0f; d <= -0.5f; d = std::nextafter(d, 0.0f)) ASSERT_TRUE(check(d)) << d;
  EXPECT_GT(checked, 9000000);
}

TEST(Sampling, CounterRandomIsTheCounterGenerator) {
  const Tensor seeds = Tensor::from_vector(std::vector<int64_t>{0, -1, 0x123456789abcll}, {3});
  const Tensor positions = Tensor::from_vector(std::vector<int64_t>{0, 7, -3}, {3}, DType::I32);
  Tensor bits = Tensor::empty({3, 70}, DType::I64);
  Tensor f32 = Tensor::empty({3, 70}, DType::F32);
  Tensor f64 = Tensor::empty({3, 70}, DType::F64);
  ops::counter_random(seeds, positions, bits);
  ops::counter_random(seeds, positions, f32);
  ops::counter_random(seeds, positions, f64);
  const std::vector<int64_t> s = seeds.to_vector_i64(), p = positions.to_vector_i64();
  for (int64_t b = 0; b < 3; ++b)
    for (uint64_t v = 0; v < 70; ++v) {
      const uint64_t seed = static_cast<uint64_t>(s[b]), pos = static_cast<uint64_t>(p[b]);
      EXPECT_EQ(static_cast<uint64_t>(bits.data<int64_t>()[b * 70 + v]), counter_u64(seed, pos, v));
      EXPECT_EQ(f32.data<float>()[b * 70 + v], counter_uniform_f32(seed, pos, v));
      EXPECT_EQ(f64.data<double>()[b * 70 + v], counter_uniform_f64(seed, pos, v));
    }
}

TEST(Sampling, ValidateSamplingParamsNamesTheBadValue) {
  EXPECT_NO_THROW(ops::validate_sampling_params({}));
  EXPECT_NO_THROW(ops::validate_sampling_params({0.0f, 5, 1.0f, 1.0f, 1.5f, -2.0f, 2.0f, 20}));
  const float nan = std::numeric_limits<float>::quiet_NaN();
  auto bad = [](ops::SamplingValues v) { ops::validate_sampling_params(v); };
  ops::SamplingValues v;
  v.temperature = -0.5f;
  EXPECT_TRUE(throws_error([&] { bad(v); }, "sampling_params", {"temperature", "-0.5"}));
  v = {};
  v.temperature = nan;
  EXPECT_TRUE(throws_error([&] { bad(v); }, "sampling_params", {"temperature"}));
  v = {};
  v.top_k = -1;
  EXPECT_TRUE(throws_error([&] { bad(v); }, "sampling_params", {"top_k", "-1"}));
  for (float p : {0.0f, -0.1f, 1.5f, nan}) {
    v = {};
    v.top_p = p;
    EXPECT_TRUE(throws_error([&] { bad(v); }, "sampling_params", {"top_p must be in (0, 1]"}));
  }
  for (float p : {-0.01f, 1.01f, nan}) {
    v = {};
    v.min_p = p;
    EXPECT_TRUE(throws_error([&] { bad(v); }, "sampling_params", {"min_p must be in [0, 1]"}));
  }
  for (float p : {0.0f, -1.0f, INFINITY}) {
    v = {};
    v.repetition_penalty = p;
    EXPECT_TRUE(throws_error([&] { bad(v); }, "sampling_params", {"repetition_penalty"}));
  }
  v = {};
  v.frequency_penalty = INFINITY;
  EXPECT_TRUE(throws_error([&] { bad(v); }, "sampling_params", {"frequency_penalty"}));
  v = {};
  v.presence_penalty = nan;
  EXPECT_TRUE(throws_error([&] { bad(v); }, "sampling_params", {"presence_penalty"}));
  for (int32_t n : {-1, 21}) {
    v = {};
    v.top_logprobs = n;
    EXPECT_TRUE(throws_error([&] { bad(v); }, "sampling_params", {"top_logprobs", "[0, 20]"}));
  }
}

TEST(Sampling, RejectsBadShapesDtypesAndWorkspaces) {
  const Tensor logits = random_logits(2, 10, 1);
  const ops::SamplingTensors p = make_params({{}, {}}, kCpu);
  const Tensor ids = Tensor::empty({2}, DType::I32);
  const Tensor ws = workspace_for(2, 10, kCpu);
  EXPECT_NO_THROW(ops::sample(logits, p, ids, ws));
  EXPECT_TRUE(throws_error([&] { ops::sample(logits.reshape({20}), p, ids, ws); }, "sample",
                           {"rank 2", "(20,)"}));
  EXPECT_TRUE(throws_error([&] { ops::sample(logits.to(DType::F64), p, ids, ws); }, "sample",
                           {"'logits' must be f32 or bf16", "f64"}));
  EXPECT_TRUE(throws_error(
      [&] { ops::sample(logits.transpose(0, 1).contiguous().transpose(0, 1), p, ids, ws); },
      "sample", {"'logits' must be dense"}));
  EXPECT_TRUE(throws_error([&] { ops::sample(logits, p, Tensor::empty({3}, DType::I32), ws); },
                           "sample", {"'out_ids' must have shape (2,)", "i32(3,)"}));
  EXPECT_TRUE(throws_error([&] { ops::sample(logits, p, Tensor::empty({2}, DType::I64), ws); },
                           "sample", {"'out_ids' must be i32", "i64"}));
  ops::SamplingTensors wrong = p;
  wrong.top_k = Tensor::zeros({2}, DType::I64);
  EXPECT_TRUE(throws_error([&] { ops::sample(logits, wrong, ids, ws); }, "sample",
                           {"'top_k' must be i32"}));
  wrong = p;
  wrong.temperature = Tensor::ones({3});
  EXPECT_TRUE(throws_error([&] { ops::sample(logits, wrong, ids, ws); }, "sample",
                           {"'temperature' must have shape (2,)", "f32(3,)"}));
  wrong = p;
  wrong.seed = Tensor();
  EXPECT_TRUE(throws_error([&] { ops::sample(logits, wrong, ids, ws); }, "sample", {"'seed'"}));
  EXPECT_TRUE(throws_error([&] { ops::sample(logits, p, ids, Tensor::empty({100}, DType::U8)); },
                           "sample", {"at least 320 bytes", "u8(100,)"}));
  EXPECT_TRUE(throws_error([&] { ops::sample(logits, p, ids, Tensor()); }, "sample",
                           {"'workspace' is undefined"}));
  // The distribution needs no seed or position; its outputs are (B, V) F32.
  ops::SamplingTensors no_draw = p;
  no_draw.seed = no_draw.position = Tensor();
  Tensor scores = Tensor::empty({2, 10}), probs = Tensor::empty({2, 10});
  EXPECT_NO_THROW(ops::sampling_distribution(logits, no_draw, scores, probs, ws));
  EXPECT_TRUE(throws_error(
      [&] {
        ops::sampling_distribution(logits, no_draw, scores, Tensor::empty({2, 9}), ws);
      },
      "sampling_distribution", {"'out_probs' must have shape (2, 10)"}));
  // A vocabulary beyond 2^20 entries.
  const Tensor huge = Tensor::zeros({1, ops::kMaxSamplingVocab + 1});
  EXPECT_TRUE(throws_error(
      [&] { ops::sample(huge, make_params({{}}, kCpu), Tensor::empty({1}, DType::I32), Tensor()); },
      "sample", {"vocabulary of 1 to 1048576"}));
  // logprobs: N > 20, N > V, mismatched top tensors.
  Tensor lp = Tensor::empty({2});
  EXPECT_TRUE(throws_error(
      [&] {
        ops::logprobs(logits, ids, lp, Tensor::empty({2, 21}, DType::I32), Tensor::empty({2, 21}));
      },
      "logprobs", {"N = 21"}));
  EXPECT_TRUE(throws_error(
      [&] {
        ops::logprobs(logits, ids, lp, Tensor::empty({2, 11}, DType::I32), Tensor::empty({2, 11}));
      },
      "logprobs", {"N = 11"}));
  EXPECT_TRUE(throws_error(
      [&] {
        ops::logprobs(logits, ids, lp, Tensor::empty({2, 3}, DType::I32), Tensor());
      },
      "logprobs", {"both"}));
  EXPECT_TRUE(throws_error(
      [&] {
        ops::logprobs(logits, ids, lp, Tensor::empty({2, 3}, DType::I32), Tensor::empty({2, 4}));
      },
      "logprobs", {"'top_logprobs' must have shape (2, 3)"}));
  EXPECT_TRUE(throws_error(
      [&] {
        ops::counter_random(Tensor::zeros({2}, DType::I64), Tensor::zeros({2}, DType::I32),
                            Tensor::empty({2, 3}, DType::I32));
      },
      "counter_random", {"'out' must be i64 or f32 or f64"}));
}
