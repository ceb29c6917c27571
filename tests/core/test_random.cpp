// Seeded random numbers (random.h): the Generator is SplitMix64 over a counter, checked
// against an independent stateful SplitMix64 and published values; determinism and
// set_state; and the statistics of randn / rand_uniform / randint on 1e5 samples, with
// bounds of several standard errors so the tests are stable yet catch a wrong scale,
// shift or range.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "core/expect_error.h"
#include "microllm/core/random.h"

using namespace microllm;

namespace {

// Vigna's splitmix64.c: state += golden ratio, then the finalizer.
struct SplitMix64 {
  uint64_t state;
  uint64_t next() {
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
};

double mean_of(const std::vector<double>& v) {
  double s = 0.0;
  for (double x : v) s += x;
  return s / static_cast<double>(v.size());
}

double std_of(const std::vector<double>& v) {
  const double m = mean_of(v);
  double s = 0.0;
  for (double x : v) s += (x - m) * (x - m);
  return std::sqrt(s / static_cast<double>(v.size() - 1));
}

}  // namespace

TEST(Random, GeneratorIsSplitMix64) {
  // Published SplitMix64 outputs for seed 1234567 (Rosetta Code, "Pseudo-random
  // numbers/Splitmix64").
  Generator gen(1234567);
  EXPECT_EQ(gen.next_u64(), 6457827717110365317ull);
  EXPECT_EQ(gen.next_u64(), 3203168211198807973ull);
  EXPECT_EQ(gen.next_u64(), 9817491932198370423ull);
  EXPECT_EQ(gen.next_u64(), 4593380528125082431ull);
  EXPECT_EQ(gen.next_u64(), 16408922859458223821ull);
  for (uint64_t seed : {0ull, 1ull, 42ull, 0xffffffffffffffffull}) {
    Generator g(seed);
    SplitMix64 reference{seed};
    for (int i = 0; i < 1000; ++i)
      ASSERT_EQ(g.next_u64(), reference.next()) << seed << " draw " << i;
    EXPECT_EQ(g.offset(), 1000u);
    EXPECT_EQ(g.seed(), seed);
  }
}

TEST(Random, SameSeedSameSequenceDifferentSeedsDiffer) {
  Generator a(7), b(7), c(8);
  int equal_to_other_seed = 0;
  for (int i = 0; i < 1000; ++i) {
    const uint64_t x = a.next_u64();
    ASSERT_EQ(x, b.next_u64());
    equal_to_other_seed += x == c.next_u64();
  }
  EXPECT_EQ(equal_to_other_seed, 0);
  // Tensors drawn from equal seeds are equal; from different seeds they differ everywhere.
  Generator g1(3), g2(3), g3(4);
  const std::vector<double> t1 = randn({64}, g1, DType::F64).to_vector_f64();
  const std::vector<double> t2 = randn({64}, g2, DType::F64).to_vector_f64();
  const std::vector<double> t3 = randn({64}, g3, DType::F64).to_vector_f64();
  EXPECT_EQ(t1, t2);
  for (size_t i = 0; i < t1.size(); ++i) EXPECT_NE(t1[i], t3[i]) << i;
}

TEST(Random, SetStateReplaysFromAnOffset) {
  Generator gen(11);
  for (int i = 0; i < 10; ++i) gen.next_u64();
  EXPECT_EQ(gen.offset(), 10u);
  std::vector<uint64_t> tail;
  for (int i = 0; i < 5; ++i) tail.push_back(gen.next_u64());
  Generator replay(999);
  replay.set_state(11, 10);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(replay.next_u64(), tail[i]) << i;
  // One normal sample costs a fixed number of draws, so offsets stay predictable.
  Generator n(5);
  n.next_normal();
  const uint64_t per_normal = n.offset();
  EXPECT_GE(per_normal, 1u);
  n.next_normal();
  EXPECT_EQ(n.offset(), 2 * per_normal);
}

TEST(Random, UniformIn01With53Bits) {
  Generator gen(21);
  std::vector<double> u(100000);
  for (double& x : u) {
    x = gen.next_uniform();
    ASSERT_GE(x, 0.0);
    ASSERT_LT(x, 1.0);
    ASSERT_EQ(std::ldexp(x, 53), std::floor(std::ldexp(x, 53)));  // a multiple of 2^-53
  }
  // Uniform(0, 1): mean 1/2 and std 1/√12, standard errors ≈ 0.0009 and 0.0006.
  EXPECT_NEAR(mean_of(u), 0.5, 0.006);
  EXPECT_NEAR(std_of(u), 1.0 / std::sqrt(12.0), 0.004);
  // Each tenth of [0, 1) holds about 10% (binomial std ≈ 0.1%).
  std::vector<int> deciles(10, 0);
  for (double x : u) ++deciles[static_cast<size_t>(x * 10)];
  for (int count : deciles) EXPECT_NEAR(count, 10000, 600);
}

TEST(Random, RandnMeanAndStd) {
  Generator gen(2024);
  Tensor t = randn({100000}, gen, DType::F64);  // (1e5)
  EXPECT_EQ(t.dtype(), DType::F64);
  const std::vector<double> v = t.to_vector_f64();
  // Standard errors: mean 1/√n ≈ 0.0032, std ≈ 1/√(2n) ≈ 0.0022; bounds are ~6σ.
  EXPECT_NEAR(mean_of(v), 0.0, 0.02);
  EXPECT_NEAR(std_of(v), 1.0, 0.015);
  // About 68.27% within one σ and 95.45% within two.
  const double within1 =
      std::count_if(v.begin(), v.end(), [](double x) { return std::fabs(x) < 1; }) / 1e5;
  const double within2 =
      std::count_if(v.begin(), v.end(), [](double x) { return std::fabs(x) < 2; }) / 1e5;
  EXPECT_NEAR(within1, 0.6827, 0.01);
  EXPECT_NEAR(within2, 0.9545, 0.006);
  for (double x : v) ASSERT_TRUE(std::isfinite(x));
  // mean and std arguments shift and scale.
  const std::vector<double> w =
      randn({100000}, gen, DType::F64, Device::cpu(), 3.0, 2.0).to_vector_f64();
  EXPECT_NEAR(mean_of(w), 3.0, 0.04);
  EXPECT_NEAR(std_of(w), 2.0, 0.03);
}

TEST(Random, RandnDtypesShareTheSamples) {
  Generator a(9), b(9);
  Tensor f64 = randn({4, 8}, a, DType::F64);
  Tensor bf16 = randn({4, 8}, b, DType::BF16);
  EXPECT_EQ(bf16.dtype(), DType::BF16);
  EXPECT_EQ(bf16.shape(), (Shape{4, 8}));
  EXPECT_EQ(bf16.to_vector_f64(), f64.to(DType::BF16).to_vector_f64());
}

TEST(Random, RandUniformRange) {
  Generator gen(17);
  const std::vector<double> v = rand_uniform({100000}, gen, -2.0, 3.0, DType::F64).to_vector_f64();
  for (double x : v) {
    ASSERT_GE(x, -2.0);
    ASSERT_LT(x, 3.0);
  }
  EXPECT_NEAR(mean_of(v), 0.5, 0.03);  // standard error 5/√12/√n ≈ 0.0046
  EXPECT_LT(*std::min_element(v.begin(), v.end()), -1.99);
  EXPECT_GT(*std::max_element(v.begin(), v.end()), 2.99);
}

TEST(Random, RandintRangeAndCoverage) {
  Generator gen(33);
  Tensor t = randint({70000}, -3, 4, gen, DType::I32);  // values in [-3, 4)
  EXPECT_EQ(t.dtype(), DType::I32);
  std::vector<int> counts(7, 0);
  for (int64_t x : t.to_vector_i64()) {
    ASSERT_GE(x, -3);
    ASSERT_LT(x, 4);
    ++counts[static_cast<size_t>(x + 3)];
  }
  // Every value about 10000 times (binomial std ≈ 93).
  for (int c : counts) EXPECT_NEAR(c, 10000, 600);
  // Large ids stay in range too.
  const int64_t vocab = 151936;
  for (int64_t id : randint({10000}, 0, vocab, gen).to_vector_i64()) {
    ASSERT_GE(id, 0);
    ASSERT_LT(id, vocab);
  }
  Generator single(1);
  for (int64_t x : randint({50}, 5, 6, single).to_vector_i64()) EXPECT_EQ(x, 5);
}
