// DTypes and the narrow float formats (float_convert.h): names and sizes; exhaustive BF16
// and F16 decode/round trips; F32→BF16 and F32→F16 rounding against references written
// here from the format definitions (nearest value, ties to even, overflow to infinity);
// FP8 E4M3/E5M2 decode of all 256 codes and encode against a brute-force nearest search
// with saturation; and Tensor::to between every pair of dtypes.
//
// Signalling NaNs: the F32 → BF16/F16 conversions quiet them (set the top mantissa bit of
// the narrow format) and keep the sign and the remaining payload bits; quiet NaNs round-trip
// bit-exactly.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <iterator>
#include <limits>
#include <random>
#include <set>
#include <sstream>
#include <vector>

#include "core/expect_error.h"
#include "microllm/core/element.h"
#include "microllm/core/float_convert.h"
#include "microllm/core/tensor.h"

using namespace microllm;
using microllm::testing::throws_error;

namespace {

// ---- references from the format definitions ----------------------------------------------

// Binary format with `e` exponent bits and `m` mantissa bits, IEEE layout (all-ones exponent
// = inf/NaN). Decodes `bits` (sign in bit e+m) to a double.
double ieee_decode(uint32_t bits, int e, int m) {
  const int bias = (1 << (e - 1)) - 1;
  const bool negative = (bits >> (e + m)) & 1u;
  const uint32_t exponent = (bits >> m) & ((1u << e) - 1);
  const uint32_t mantissa = bits & ((1u << m) - 1);
  double magnitude;
  if (exponent == (1u << e) - 1)
    magnitude = mantissa ? std::numeric_limits<double>::quiet_NaN()
                         : std::numeric_limits<double>::infinity();
  else if (exponent == 0)
    magnitude = std::ldexp(static_cast<double>(mantissa), 1 - bias - m);
  else
    magnitude = std::ldexp(static_cast<double>(mantissa + (1u << m)),
                           static_cast<int>(exponent) - bias - m);
  return negative ? -magnitude : magnitude;
}

// F32 → BF16 by truncation candidates: the BF16 values just below and above |f| in
// magnitude (the one above the largest finite value counts as 2^128, as IEEE overflow
// rounding does); the nearer one wins, ties go to the even BF16 pattern.
uint16_t bf16_reference(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t mag = u & 0x7fffffffu;
  const uint32_t lo = mag & 0xffff0000u;
  if (lo == mag) return static_cast<uint16_t>(sign | (lo >> 16));
  const uint32_t hi = lo + 0x10000u;
  const double x = std::bit_cast<float>(mag);
  const double below = std::bit_cast<float>(lo);
  const double above = hi == 0x7f800000u ? std::ldexp(1.0, 128) : std::bit_cast<float>(hi);
  const double d_below = x - below, d_above = above - x;  // exact in double
  uint32_t chosen;
  if (d_below < d_above)
    chosen = lo;
  else if (d_above < d_below)
    chosen = hi;
  else
    chosen = ((lo >> 16) & 1u) ? hi : lo;
  return static_cast<uint16_t>(sign | (chosen >> 16));
}

// Encodes an exactly representable non-negative F16 magnitude (65536 meaning infinity).
uint16_t f16_encode_exact(double v) {
  if (v >= 65536.0) return 0x7c00u;
  if (v < std::ldexp(1.0, -14)) return static_cast<uint16_t>(v / std::ldexp(1.0, -24));
  const int e = std::ilogb(v);
  const int mantissa = static_cast<int>(v / std::ldexp(1.0, e - 10)) - 1024;
  return static_cast<uint16_t>(((e + 15) << 10) | mantissa);
}

// F32 → F16: count quanta of F16's spacing at |f|'s binade (subnormals share 2^-24),
// round the count with std::nearbyint (ties to even), overflow past 2^16 to infinity.
uint16_t f16_reference(float f) {
  const uint16_t sign = std::signbit(f) ? 0x8000u : 0u;
  const double a = std::fabs(static_cast<double>(f));
  if (std::isinf(a)) return sign | 0x7c00u;
  if (a == 0.0) return sign;
  const int e = std::max(std::ilogb(a), -14);
  const double quantum = std::ldexp(1.0, e - 10);
  const double rounded = std::nearbyint(a / quantum) * quantum;
  return sign | f16_encode_exact(rounded);
}

// FP8 from the OCP definitions. E4M3 "fn": bias 7, no infinities, S.1111.111 is NaN.
double e4m3_reference(uint8_t b) {
  const int exponent = (b >> 3) & 15, mantissa = b & 7;
  double magnitude;
  if (exponent == 15 && mantissa == 7)
    magnitude = std::numeric_limits<double>::quiet_NaN();
  else if (exponent == 0)
    magnitude = mantissa / 8.0 * std::ldexp(1.0, -6);
  else
    magnitude = (1.0 + mantissa / 8.0) * std::ldexp(1.0, exponent - 7);
  return (b & 0x80) ? -magnitude : magnitude;
}
// E5M2: bias 15, exponent 31 holds inf (mantissa 0) and NaN.
double e5m2_reference(uint8_t b) { return ieee_decode(b, 5, 2); }

struct Fp8Case {
  const char* name;
  double (*reference)(uint8_t);
  float (*decode)(uint8_t);
  uint8_t (*encode)(float);
  double max_finite;
};
const Fp8Case kFp8[] = {{"e4m3", e4m3_reference, fp8_e4m3_to_f32, f32_to_fp8_e4m3, 448.0},
                        {"e5m2", e5m2_reference, fp8_e5m2_to_f32, f32_to_fp8_e5m2, 57344.0}};

// Nearest finite FP8 code to `x` by brute force over every non-negative finite code; ties
// to the even code (= even mantissa). Above the largest finite value the nearest one is
// that value (saturation); distances are computed only inside the range, where the double
// subtraction is exact (a huge |x| would make every distance round to |x| and tie).
uint8_t fp8_nearest(const Fp8Case& f, float x) {
  const double a = std::min(std::fabs(static_cast<double>(x)), f.max_finite);
  int best = 0;
  double best_distance = std::numeric_limits<double>::infinity();
  for (int code = 0; code < 0x80; ++code) {
    const double v = f.reference(static_cast<uint8_t>(code));
    if (!std::isfinite(v)) continue;
    const double distance = std::fabs(v - a);
    if (distance < best_distance || (distance == best_distance && code % 2 == 0)) {
      best = code;
      best_distance = distance;
    }
  }
  return static_cast<uint8_t>(best | (std::signbit(x) ? 0x80 : 0));
}

}  // namespace

// ---- dtype metadata ----------------------------------------------------------------------

TEST(DType, NamesSizesRoundTrip) {
  struct Expected {
    DType dtype;
    size_t size;
    const char* name;
    bool floating;
  };
  const Expected table[] = {{DType::F64, 8, "f64", true},       {DType::F32, 4, "f32", true},
                            {DType::F16, 2, "f16", true},       {DType::BF16, 2, "bf16", true},
                            {DType::F8E4M3, 1, "f8e4m3", true}, {DType::F8E5M2, 1, "f8e5m2", true},
                            {DType::I64, 8, "i64", false},      {DType::I32, 4, "i32", false},
                            {DType::I8, 1, "i8", false},        {DType::U8, 1, "u8", false},
                            {DType::Bool, 1, "bool", false}};
  ASSERT_EQ(std::size(kAllDTypes), std::size(table));
  std::set<std::string_view> names;
  for (size_t i = 0; i < std::size(table); ++i) {
    const DType d = kAllDTypes[i];
    EXPECT_EQ(d, table[i].dtype);
    EXPECT_EQ(dtype_size(d), table[i].size) << table[i].name;
    EXPECT_EQ(dtype_name(d), table[i].name);
    EXPECT_EQ(dtype_from_name(dtype_name(d)), d);
    EXPECT_EQ(is_floating(d), table[i].floating) << table[i].name;
    EXPECT_NE(is_integral(d), is_floating(d)) << table[i].name;
    std::ostringstream out;
    out << d;
    EXPECT_EQ(out.str(), table[i].name);
    names.insert(dtype_name(d));
    // A tensor of the dtype occupies numel · size bytes.
    EXPECT_EQ(Tensor::zeros({3, 5}, d).nbytes(), 15 * table[i].size);
  }
  EXPECT_EQ(names.size(), std::size(table));
  EXPECT_EQ(dtype_from_name("float32"), DType::F32);
  EXPECT_EQ(dtype_from_name("bfloat16"), DType::BF16);
  EXPECT_EQ(dtype_from_name("float16"), DType::F16);
  EXPECT_EQ(dtype_from_name("int64"), DType::I64);
  EXPECT_EQ(dtype_from_name("float8_e4m3fn"), DType::F8E4M3);
  EXPECT_TRUE(throws_error([] { dtype_from_name("f128"); }, "dtype", {"'f128'"}));
  EXPECT_TRUE(throws_error([] { dtype_from_name("F32"); }, "dtype", {"'F32'"}));
}

// ---- BF16 and F16: every bit pattern -----------------------------------------------------

TEST(DType, Bf16AllPatternsRoundTrip) {
  for (uint32_t b = 0; b <= 0xffffu; ++b) {
    const uint16_t bits = static_cast<uint16_t>(b);
    const float f = bf16_bits_to_f32(bits);
    ASSERT_EQ(std::bit_cast<uint32_t>(f), b << 16) << std::hex << b;
    const double expected = ieee_decode(b, 8, 7);
    const uint16_t back = f32_to_bf16_bits(f);
    if (std::isnan(expected)) {
      ASSERT_TRUE(std::isnan(f)) << std::hex << b;
      ASSERT_TRUE(std::isnan(bf16_bits_to_f32(back))) << std::hex << b;
      // Quiet NaNs (top mantissa bit 0x40 set) keep their bits; signalling ones are quieted.
      ASSERT_EQ(back, bits | 0x0040u) << std::hex << b;
    } else {
      ASSERT_EQ(static_cast<double>(f), expected) << std::hex << b;
      ASSERT_EQ(std::signbit(f), std::signbit(expected)) << std::hex << b;
      ASSERT_EQ(back, bits) << std::hex << b;
    }
  }
}

TEST(DType, F16AllPatternsRoundTrip) {
  for (uint32_t b = 0; b <= 0xffffu; ++b) {
    const uint16_t bits = static_cast<uint16_t>(b);
    const float f = f16_bits_to_f32(bits);
    const double expected = ieee_decode(b, 5, 10);
    const uint16_t back = f32_to_f16_bits(f);
    if (std::isnan(expected)) {
      ASSERT_TRUE(std::isnan(f)) << std::hex << b;
      ASSERT_EQ(std::signbit(f), (b & 0x8000u) != 0) << std::hex << b;
      ASSERT_EQ(back, bits | 0x0200u) << std::hex << b;  // quiet bit of binary16
    } else {
      ASSERT_EQ(static_cast<double>(f), expected) << std::hex << b;
      ASSERT_EQ(std::signbit(f), std::signbit(expected)) << std::hex << b;
      ASSERT_EQ(back, bits) << std::hex << b;
    }
  }
}

// ---- F32 → BF16 / F16 rounding -----------------------------------------------------------

TEST(DType, F32ToBf16MatchesReference) {
  // Every midpoint between neighbouring BF16 magnitudes (including max finite → 2^128) and
  // the floats on either side of it, with both signs: decides every tie and near-tie.
  for (uint32_t k = 0; k <= 0x7f7fu; ++k) {
    const uint32_t mid = (k << 16) | 0x8000u;
    const uint16_t even = (k & 1u) ? static_cast<uint16_t>(k + 1) : static_cast<uint16_t>(k);
    for (uint32_t sign : {0u, 0x80000000u}) {
      const uint16_t s = static_cast<uint16_t>(sign >> 16);
      ASSERT_EQ(f32_to_bf16_bits(std::bit_cast<float>(sign | mid)), s | even) << std::hex << k;
      ASSERT_EQ(f32_to_bf16_bits(std::bit_cast<float>(sign | (mid - 1))), s | k) << std::hex << k;
      ASSERT_EQ(f32_to_bf16_bits(std::bit_cast<float>(sign | (mid + 1))), s | (k + 1))
          << std::hex << k;
    }
  }
  // 2^24 random F32 bit patterns (NaNs checked separately below).
  std::mt19937_64 rng(20240611);
  for (int i = 0; i < (1 << 24); ++i) {
    const float f = std::bit_cast<float>(static_cast<uint32_t>(rng()));
    if (std::isnan(f)) continue;
    ASSERT_EQ(f32_to_bf16_bits(f), bf16_reference(f)) << std::hex << std::bit_cast<uint32_t>(f);
  }
  const float max = std::numeric_limits<float>::max();
  EXPECT_EQ(f32_to_bf16_bits(max), 0x7f80u);  // rounds up to infinity
  EXPECT_EQ(f32_to_bf16_bits(-max), 0xff80u);
  EXPECT_EQ(f32_to_bf16_bits(std::bit_cast<float>(0x7f7f7fffu)), 0x7f7fu);
  EXPECT_EQ(f32_to_bf16_bits(1.0f + 0x1.0p-8f), 0x3f80u);  // tie, 1.0 is even
  EXPECT_EQ(f32_to_bf16_bits(1.0f + 0x3.0p-8f), 0x3f82u);  // tie, rounds up to even
  EXPECT_EQ(f32_to_bf16_bits(std::bit_cast<float>(0x00008000u)), 0x0000u);  // denormal tie
  EXPECT_EQ(f32_to_bf16_bits(std::bit_cast<float>(0x00018000u)), 0x0002u);
  EXPECT_EQ(f32_to_bf16_bits(std::bit_cast<float>(0x00000001u)), 0x0000u);  // smallest denormal
  EXPECT_EQ(f32_to_bf16_bits(0.0f), 0x0000u);
  EXPECT_EQ(f32_to_bf16_bits(-0.0f), 0x8000u);
  EXPECT_EQ(f32_to_bf16_bits(INFINITY), 0x7f80u);
  EXPECT_EQ(f32_to_bf16_bits(-INFINITY), 0xff80u);
  // NaNs stay NaN, keep their sign, become quiet — including a payload only in the low bits
  // that truncation alone would turn into infinity.
  for (uint32_t nan : {0x7fc00000u, 0x7f800001u, 0xff800001u, 0x7fa00000u, 0xffffffffu}) {
    const uint16_t out = f32_to_bf16_bits(std::bit_cast<float>(nan));
    EXPECT_TRUE(std::isnan(bf16_bits_to_f32(out))) << std::hex << nan;
    EXPECT_EQ(out & 0x8000u, (nan >> 16) & 0x8000u) << std::hex << nan;
    EXPECT_TRUE(out & 0x0040u) << std::hex << nan;
  }
}

TEST(DType, F32ToF16MatchesReference) {
  // Every midpoint between neighbouring F16 magnitudes (max finite's neighbour is 2^16),
  // subnormals included; each midpoint is exact in F32.
  for (uint32_t k = 0; k <= 0x7bffu; ++k) {
    const double lo = ieee_decode(k, 5, 10);
    const double hi = k == 0x7bffu ? 65536.0 : ieee_decode(k + 1, 5, 10);
    const float mid = static_cast<float>((lo + hi) / 2);
    ASSERT_EQ(static_cast<double>(mid), (lo + hi) / 2);
    const uint16_t even = (k & 1u) ? static_cast<uint16_t>(k + 1) : static_cast<uint16_t>(k);
    for (float sign : {1.0f, -1.0f}) {
      const uint16_t s = sign < 0 ? 0x8000u : 0u;
      ASSERT_EQ(f32_to_f16_bits(sign * mid), s | even) << std::hex << k;
      ASSERT_EQ(f32_to_f16_bits(sign * std::nextafter(mid, 0.0f)), s | k) << std::hex << k;
      ASSERT_EQ(f32_to_f16_bits(sign * std::nextafter(mid, INFINITY)), s | (k + 1))
          << std::hex << k;
    }
  }
  std::mt19937_64 rng(7);
  for (int i = 0; i < (1 << 24); ++i) {
    // Half the draws are random bit patterns, half are concentrated on F16's range.
    uint32_t u = static_cast<uint32_t>(rng());
    if (i & 1) u = (u & 0x807fffffu) | ((96u + (u >> 23) % 48u) << 23);  // exponents 2^-31..2^16
    const float f = std::bit_cast<float>(u);
    if (std::isnan(f)) continue;
    ASSERT_EQ(f32_to_f16_bits(f), f16_reference(f)) << std::hex << u;
  }
  EXPECT_EQ(f32_to_f16_bits(65504.0f), 0x7bffu);
  EXPECT_EQ(f32_to_f16_bits(std::nextafter(65520.0f, 0.0f)), 0x7bffu);
  EXPECT_EQ(f32_to_f16_bits(65520.0f), 0x7c00u);  // the tie with 2^16 overflows
  EXPECT_EQ(f32_to_f16_bits(-1e30f), 0xfc00u);
  EXPECT_EQ(f32_to_f16_bits(0x1.0p-24f), 0x0001u);  // smallest subnormal
  EXPECT_EQ(f32_to_f16_bits(0x1.0p-25f), 0x0000u);  // half of it: tie to zero
  EXPECT_EQ(f32_to_f16_bits(std::nextafter(0x1.0p-25f, 1.0f)), 0x0001u);
  EXPECT_EQ(f32_to_f16_bits(0x3.0p-25f), 0x0002u);               // 1.5 quanta: tie to 2
  EXPECT_EQ(f32_to_f16_bits(0x1.0p-14f - 0x1.0p-25f), 0x0400u);  // tie into the first normal
  EXPECT_EQ(f32_to_f16_bits(1.0f + 0x1.0p-11f), 0x3c00u);
  EXPECT_EQ(f32_to_f16_bits(1.0f + 0x3.0p-11f), 0x3c02u);
  EXPECT_EQ(f32_to_f16_bits(std::bit_cast<float>(0x00400000u)), 0x0000u);  // F32 denormal
  EXPECT_EQ(f32_to_f16_bits(-0.0f), 0x8000u);
  EXPECT_EQ(f32_to_f16_bits(INFINITY), 0x7c00u);
  EXPECT_EQ(f32_to_f16_bits(-INFINITY), 0xfc00u);
  for (uint32_t nan : {0x7fc00000u, 0x7f800001u, 0xff800001u, 0xffffffffu}) {
    const uint16_t out = f32_to_f16_bits(std::bit_cast<float>(nan));
    EXPECT_TRUE(std::isnan(f16_bits_to_f32(out))) << std::hex << nan;
    EXPECT_EQ(out & 0x8000u, (nan >> 16) & 0x8000u) << std::hex << nan;
  }
}

// ---- FP8 ---------------------------------------------------------------------------------

TEST(DType, Fp8DecodeAllCodes) {
  for (const Fp8Case& f : kFp8) {
    double largest = 0.0;
    for (int code = 0; code < 256; ++code) {
      const double expected = f.reference(static_cast<uint8_t>(code));
      if (std::isfinite(expected)) largest = std::max(largest, expected);
      const float got = f.decode(static_cast<uint8_t>(code));
      if (std::isnan(expected)) {
        EXPECT_TRUE(std::isnan(got)) << f.name << " " << code;
      } else {
        EXPECT_EQ(static_cast<double>(got), expected) << f.name << " " << code;
        EXPECT_EQ(std::signbit(got), code >= 0x80) << f.name << " " << code;
      }
    }
    EXPECT_EQ(largest, f.max_finite) << f.name;
  }
  // Anchors of the definitions.
  EXPECT_EQ(fp8_e4m3_to_f32(0x7e), 448.0f);
  EXPECT_EQ(fp8_e4m3_to_f32(0x38), 1.0f);
  EXPECT_EQ(fp8_e4m3_to_f32(0x01), 0x1.0p-9f);
  EXPECT_EQ(fp8_e4m3_to_f32(0x78), 256.0f);  // exponent 15 is finite in "fn"
  EXPECT_TRUE(std::isnan(fp8_e4m3_to_f32(0x7f)));
  EXPECT_TRUE(std::isnan(fp8_e4m3_to_f32(0xff)));
  EXPECT_EQ(fp8_e5m2_to_f32(0x7b), 57344.0f);
  EXPECT_EQ(fp8_e5m2_to_f32(0x3c), 1.0f);
  EXPECT_EQ(fp8_e5m2_to_f32(0x01), 0x1.0p-16f);
  EXPECT_EQ(fp8_e5m2_to_f32(0x7c), INFINITY);
  EXPECT_EQ(fp8_e5m2_to_f32(0xfc), -INFINITY);
  EXPECT_TRUE(std::isnan(fp8_e5m2_to_f32(0x7d)));
}

TEST(DType, Fp8EncodeNearestWithSaturation) {
  for (const Fp8Case& f : kFp8) {
    // Every finite code encodes back to itself.
    for (int code = 0; code < 256; ++code) {
      const double v = f.reference(static_cast<uint8_t>(code));
      if (!std::isfinite(v)) continue;
      EXPECT_EQ(f.encode(static_cast<float>(v)), code) << f.name;
    }
    // Midpoints between neighbouring codes and the floats next to them.
    for (int code = 0; code < 0x7f; ++code) {
      const double lo = f.reference(static_cast<uint8_t>(code));
      const double hi = f.reference(static_cast<uint8_t>(code + 1));
      if (!std::isfinite(lo) || !std::isfinite(hi)) continue;
      const float mid = static_cast<float>((lo + hi) / 2);
      for (float x : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, INFINITY), -mid})
        EXPECT_EQ(f.encode(x), fp8_nearest(f, x)) << f.name << " x=" << x;
      EXPECT_EQ(f.encode(mid), code % 2 ? code + 1 : code) << f.name << " tie at " << mid;
    }
    // Random magnitudes across the format's range and beyond, and random bit patterns.
    std::mt19937_64 rng(99);
    std::uniform_real_distribution<double> log2_magnitude(-22.0, 20.0);
    for (int i = 0; i < 200000; ++i) {
      float x = static_cast<float>(std::exp2(log2_magnitude(rng)) * ((rng() & 1) ? -1.0 : 1.0));
      if (i % 4 == 0) x = std::bit_cast<float>(static_cast<uint32_t>(rng()));
      if (std::isnan(x)) continue;
      ASSERT_EQ(f.encode(x), fp8_nearest(f, x)) << f.name << " x=" << x;
    }
    // Saturation: beyond max (infinities included) gives ±max; NaN stays NaN.
    const uint8_t max_code = fp8_nearest(f, static_cast<float>(f.max_finite));
    EXPECT_EQ(f.decode(max_code), static_cast<float>(f.max_finite)) << f.name;
    for (float big : {static_cast<float>(f.max_finite * 1.5), 1e30f, INFINITY}) {
      EXPECT_EQ(f.encode(big), max_code) << f.name << " " << big;
      EXPECT_EQ(f.encode(-big), max_code | 0x80) << f.name << " " << big;
    }
    EXPECT_TRUE(std::isnan(f.decode(f.encode(NAN)))) << f.name;
    EXPECT_TRUE(std::isnan(f.decode(f.encode(-NAN)))) << f.name;
    EXPECT_EQ(f.encode(0.0f), 0x00) << f.name;
    EXPECT_EQ(f.encode(-0.0f), 0x80) << f.name;
  }
  EXPECT_EQ(f32_to_fp8_e4m3(464.0f), 0x7e);      // would round to 480, which E4M3 lacks
  EXPECT_EQ(f32_to_fp8_e5m2(61440.0f), 0x7b);    // IEEE rounding would give infinity
  EXPECT_EQ(f32_to_fp8_e4m3(0x1.0p-10f), 0x00);  // half the smallest subnormal: tie to 0
  EXPECT_EQ(f32_to_fp8_e4m3(0x3.0p-10f), 0x02);  // 1.5 quanta: tie to even
}

// ---- Tensor::to between dtypes -----------------------------------------------------------

TEST(DType, TensorToEveryPairExactValues) {
  for (DType src : kAllDTypes) {
    for (DType dst : kAllDTypes) {
      // Values every dtype of the pair holds exactly (E5M2 has 2 mantissa bits).
      std::vector<double> values{0, 1, 2, 3, 4, 6, 7};
      const bool unsigned_pair = src == DType::U8 || dst == DType::U8;
      if (!unsigned_pair) values.insert(values.end(), {-2, -7});
      if (src == DType::Bool || dst == DType::Bool) values = {0, 1, 1, 0};
      const int64_t n = static_cast<int64_t>(values.size());
      Tensor a = Tensor::from_vector(values, {n}, src);
      ASSERT_EQ(a.to_vector_f64(), values) << dtype_name(src);
      Tensor b = a.to(dst);
      EXPECT_EQ(b.dtype(), dst);
      EXPECT_EQ(b.shape(), a.shape());
      EXPECT_EQ(b.to_vector_f64(), values) << dtype_name(src) << " -> " << dtype_name(dst);
      EXPECT_EQ(b.to(src).to_vector_f64(), values) << dtype_name(src) << " <-> " << dtype_name(dst);
      // A strided source converts in the view's element order.
      Tensor strided = Tensor::from_vector(values, {1, n}, src).expand({2, n}).transpose(0, 1);
      std::vector<double> expected;
      for (double v : values) expected.insert(expected.end(), {v, v});
      EXPECT_EQ(strided.to(dst).to_vector_f64(), expected)
          << dtype_name(src) << " -> " << dtype_name(dst);
    }
  }
}

TEST(DType, TensorToIntegerTruncatesAndBool) {
  Tensor f = Tensor::from_vector(std::vector<float>{2.7f, -2.7f, 0.5f, -0.5f, 127.9f}, {5});
  for (DType d : {DType::I64, DType::I32, DType::I8})
    EXPECT_EQ(f.to(d).to_vector_i64(), (std::vector<int64_t>{2, -2, 0, 0, 127})) << dtype_name(d);
  Tensor u = Tensor::from_vector(std::vector<double>{3.9, 255.5}, {2}, DType::F64);
  EXPECT_EQ(u.to(DType::U8).to_vector_i64(), (std::vector<int64_t>{3, 255}));
  Tensor b = Tensor::from_vector(std::vector<float>{0.0f, 2.5f, -1.0f, 0.25f, -0.0f}, {5});
  EXPECT_EQ(b.to(DType::Bool).to_vector_i64(), (std::vector<int64_t>{0, 1, 1, 1, 0}));
  Tensor ints = Tensor::from_vector(std::vector<int64_t>{0, 5, -3}, {3});
  EXPECT_EQ(ints.to(DType::Bool).to_vector_i64(), (std::vector<int64_t>{0, 1, 1}));
}

TEST(DType, TensorToKeepsLargeIds) {
  const std::vector<int64_t> ids{0, 1, 151935, 16777217, 2147483647, -2147483648LL, 123456789};
  Tensor a = Tensor::from_vector(ids, {static_cast<int64_t>(ids.size())});
  Tensor b = a.to(DType::I32);
  for (size_t i = 0; i < ids.size(); ++i) EXPECT_EQ(b.data<int32_t>()[i], ids[i]);
  EXPECT_EQ(b.to(DType::I64).to_vector_i64(), ids);
  EXPECT_EQ(b.to_vector_i64(), ids);
  // Beyond 2^53 an F64 trip would lose them; an I64 tensor keeps them.
  const std::vector<int64_t> huge{(int64_t{1} << 53) + 1, std::numeric_limits<int64_t>::max()};
  EXPECT_EQ(Tensor::from_vector(huge, {2}).to_vector_i64(), huge);
}

TEST(DType, TensorToNarrowFloatsRounds) {
  const std::vector<float> values{1.0f + 0x1.0p-8f, 1.0f + 0x3.0p-8f, 65520.0f,
                                  1000.0f,          -INFINITY,        0x1.0p-25f};
  Tensor f = Tensor::from_vector(values, {6});
  Tensor bf = f.to(DType::BF16);
  Tensor h = f.to(DType::F16);
  for (size_t i = 0; i < values.size(); ++i) {
    EXPECT_EQ(bf.data<uint16_t>()[i], bf16_reference(values[i])) << i;
    EXPECT_EQ(h.data<uint16_t>()[i], f16_reference(values[i])) << i;
  }
  EXPECT_EQ(f.to(DType::F8E4M3).to_vector_f64()[3], 448.0);
  EXPECT_EQ(f.to(DType::F8E4M3).to_vector_f64()[4], -448.0);
  EXPECT_EQ(f.to(DType::F8E5M2).to_vector_f64()[4], -57344.0);
  // F64 sources reach the narrow formats through F32, as element.h documents: the F64
  // value 1 + 2^-8 + 2^-30 first becomes the tie 1 + 2^-8, which then goes to even (1.0).
  Tensor d = Tensor::from_vector(std::vector<double>{1.0 + 0x1.0p-8 + 0x1.0p-30}, {1}, DType::F64);
  EXPECT_EQ(d.to(DType::BF16).data<uint16_t>()[0], 0x3f80u);
}
