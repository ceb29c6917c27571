// Counter-based generator (counter_rng.h): Philox4x32 against the published known answers,
// the (seed, position, lane) keying, the exact float conversions (never 0 or 1), the
// 128-bit multiply-high against the compiler's 128-bit integers, and the uniformity of
// draws over positions and lanes (chi-square on 64 bins, bounds far in the tail).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "microllm/core/counter_rng.h"

using namespace microllm;

namespace {

struct KnownAnswer {
  uint32_t counter[4];
  uint32_t key[2];
  uint32_t expected[4];
};

// Source: the file `kat_vectors` of the Random123 distribution (D. E. Shaw Research,
// Random123 1.14, examples/kat_vectors), lines "philox4x32 7 ..." and "philox4x32 10 ...":
// columns are the counter (4 words), the key (2 words) and the expected output (4 words).
constexpr KnownAnswer kPhilox7[] = {
    {{0x00000000, 0x00000000, 0x00000000, 0x00000000},
     {0x00000000, 0x00000000},
     {0x5f6fb709, 0x0d893f64, 0x4f121f81, 0x4f730a48}},
    {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
     {0xffffffff, 0xffffffff},
     {0x5207ddc2, 0x45165e59, 0x4d8ee751, 0x8c52f662}},
    {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
     {0xa4093822, 0x299f31d0},
     {0x4dfccaba, 0x190a87f0, 0xc47362ba, 0xb6b5242a}},
};
constexpr KnownAnswer kPhilox10[] = {
    {{0x00000000, 0x00000000, 0x00000000, 0x00000000},
     {0x00000000, 0x00000000},
     {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
    {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
     {0xffffffff, 0xffffffff},
     {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
    {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
     {0xa4093822, 0x299f31d0},
     {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
};

template <int kRounds>
void expect_known_answers(const KnownAnswer (&cases)[3]) {
  for (const KnownAnswer& kat : cases) {
    Philox4x32Block counter{{kat.counter[0], kat.counter[1], kat.counter[2], kat.counter[3]}};
    const Philox4x32Block out = philox4x32<kRounds>(counter, kat.key[0], kat.key[1]);
    for (int w = 0; w < 4; ++w)
      EXPECT_EQ(out.word[w], kat.expected[w]) << "rounds " << kRounds << " word " << w;
  }
}

// Upper-tail probability of a chi-square statistic with `dof` degrees of freedom, by the
// Wilson–Hilferty normal approximation (accurate to a few percent of the p-value in the
// range used here, dof = 63).
double chi_square_upper_tail(double statistic, double dof) {
  const double z =
      (std::cbrt(statistic / dof) - (1.0 - 2.0 / (9.0 * dof))) / std::sqrt(2.0 / (9.0 * dof));
  return 0.5 * std::erfc(z / std::sqrt(2.0));
}

double chi_square_uniform(const std::vector<int64_t>& counts) {
  double total = 0.0;
  for (int64_t c : counts) total += static_cast<double>(c);
  const double expected = total / static_cast<double>(counts.size());
  double chi2 = 0.0;
  for (int64_t c : counts) chi2 += (c - expected) * (c - expected) / expected;
  return chi2;
}

}  // namespace

TEST(CounterRng, Philox4x32MatchesRandom123KnownAnswers) {
  expect_known_answers<10>(kPhilox10);
  expect_known_answers<7>(kPhilox7);
}

TEST(CounterRng, CounterBlockKeysSeedPositionAndLane) {
  const uint64_t seed = 0x299f31d0a4093822ull, position = 0x0370734413198a2eull,
                 lane = 0x85a308d3243f6a88ull;
  // The third Random123 case, reached through the (seed, position, lane) layout.
  const Philox4x32Block b = counter_block(seed, position, lane);
  for (int w = 0; w < 4; ++w) EXPECT_EQ(b.word[w], kPhilox10[2].expected[w]) << "word " << w;
  EXPECT_EQ(counter_u64(seed, position, lane),
            (static_cast<uint64_t>(kPhilox10[2].expected[1]) << 32) | kPhilox10[2].expected[0]);
  EXPECT_EQ(counter_uniform_f32(seed, position, lane),
            uniform_f32_from_bits(kPhilox10[2].expected[0]));
  // Every argument changes the block.
  EXPECT_NE(counter_u64(seed + 1, position, lane), counter_u64(seed, position, lane));
  EXPECT_NE(counter_u64(seed, position + 1, lane), counter_u64(seed, position, lane));
  EXPECT_NE(counter_u64(seed, position, lane + 1), counter_u64(seed, position, lane));
  EXPECT_NE(counter_u64(seed, position, lane), counter_u64(seed, lane, position));
}

TEST(CounterRng, FloatConversionsAreExactAndOpen) {
  EXPECT_EQ(uniform_f32_from_bits(0u), 0x1p-24f);
  EXPECT_EQ(uniform_f32_from_bits(0xffffffffu), 1.0f - 0x1p-24f);
  EXPECT_EQ(uniform_f64_from_bits(0u), 0x1p-53);
  EXPECT_EQ(uniform_f64_from_bits(~0ull), 1.0 - 0x1p-53);
  for (uint64_t i = 0; i < 100000; ++i) {
    const uint64_t bits = counter_u64(7, i, 3);
    const float u32 = uniform_f32_from_bits(static_cast<uint32_t>(bits));
    const double u64 = uniform_f64_from_bits(bits);
    ASSERT_TRUE(u32 > 0.0f && u32 < 1.0f);
    ASSERT_TRUE(u64 > 0.0 && u64 < 1.0);
    // (k + 1/2)·2^-23 with k the 23 high bits, computed independently in F64.
    const double want32 = (static_cast<double>(static_cast<uint32_t>(bits) >> 9) + 0.5) * 0x1p-23;
    ASSERT_EQ(static_cast<double>(u32), want32);
    // u·2^53 is the odd integer 2·(bits >> 12) + 1.
    const double scaled = u64 * 0x1p53;
    ASSERT_EQ(static_cast<uint64_t>(scaled), ((bits >> 12) << 1) + 1);
  }
}

TEST(CounterRng, MulHiMatchesWideIntegers) {
  __extension__ typedef unsigned __int128 u128;
  const uint64_t edge[] = {
      0, 1, 2, 0xffffffffull, 0x100000000ull, ~0ull, ~0ull - 1, 0x8000000000000000ull};
  for (uint64_t a : edge)
    for (uint64_t b : edge)
      EXPECT_EQ(mul_hi_u64(a, b), static_cast<uint64_t>((static_cast<u128>(a) * b) >> 64));
  for (uint64_t i = 0; i < 10000; ++i) {
    const uint64_t a = counter_u64(1, i, 0), b = counter_u64(2, i, 0);
    ASSERT_EQ(mul_hi_u64(a, b), static_cast<uint64_t>((static_cast<u128>(a) * b) >> 64));
  }
}

TEST(CounterRng, CounterBelowStaysInRangeAndIsUniform) {
  const uint64_t n = 64;
  std::vector<int64_t> counts(n, 0);
  for (uint64_t position = 0; position < 64000; ++position) {
    const uint64_t v = counter_below(11, position, 0, n);
    ASSERT_LT(v, n);
    ++counts[v];
  }
  EXPECT_GT(chi_square_upper_tail(chi_square_uniform(counts), n - 1.0), 1e-4);
  EXPECT_EQ(counter_below(11, 5, 0, 1), 0u);
}

TEST(CounterRng, UniformsAreUniformOverPositionsAndLanes) {
  // 64 bins; 64,000 draws along positions (fixed lane) and along lanes (fixed position).
  for (int along_lanes = 0; along_lanes < 2; ++along_lanes) {
    std::vector<int64_t> f32_bins(64, 0), f64_bins(64, 0);
    for (uint64_t i = 0; i < 64000; ++i) {
      const uint64_t position = along_lanes ? 12345 : i, lane = along_lanes ? i : 17;
      ++f32_bins[static_cast<size_t>(counter_uniform_f32(99, position, lane) * 64.0f)];
      ++f64_bins[static_cast<size_t>(counter_uniform_f64(99, position, lane) * 64.0)];
    }
    EXPECT_GT(chi_square_upper_tail(chi_square_uniform(f32_bins), 63.0), 1e-4) << along_lanes;
    EXPECT_GT(chi_square_upper_tail(chi_square_uniform(f64_bins), 63.0), 1e-4) << along_lanes;
  }
}
