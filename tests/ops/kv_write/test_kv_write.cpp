// kv_write on the CPU: rows land in cache[slot / BS][slot % BS], padding rows (slot −1) and
// every other slot keep their bytes, F32 → BF16 rounds to nearest even (values derived by
// hand), strided views of a fused QKV buffer, and the error messages.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "core/expect_error.h"
#include "microllm/core/float_convert.h"
#include "microllm/core/random.h"
#include "microllm/ops/kv_write.h"

using namespace microllm;
using microllm::testing::throws_error;

namespace {

Tensor i32(const std::vector<int64_t>& values) {
  return Tensor::from_vector(values, {static_cast<int64_t>(values.size())}, DType::I32);
}

// The bytes of a dense tensor.
std::vector<unsigned char> bytes_of(const Tensor& t) {
  std::vector<unsigned char> out(t.nbytes());
  std::memcpy(out.data(), t.raw_data(), t.nbytes());
  return out;
}

// Checks that slot s of `cache` (NB, BS, Hkv, D) holds row n of `rows` (N, Hkv, D) for every
// (n, s = slots[n] ≥ 0) and that every other slot still has the bytes of `before`.
::testing::AssertionResult written_exactly(const Tensor& cache,
                                           const std::vector<unsigned char>& before,
                                           const Tensor& expected_rows,
                                           const std::vector<int64_t>& slots) {
  const int64_t row_bytes =
      cache.size(2) * cache.size(3) * static_cast<int64_t>(dtype_size(cache.dtype()));
  const int64_t num_slots = cache.size(0) * cache.size(1);
  const std::vector<unsigned char> after = bytes_of(cache);
  const std::vector<unsigned char> rows = bytes_of(expected_rows);  // in the cache dtype
  std::vector<int64_t> row_of_slot(static_cast<size_t>(num_slots), -1);
  for (size_t n = 0; n < slots.size(); ++n)
    if (slots[n] >= 0) row_of_slot[slots[n]] = static_cast<int64_t>(n);
  for (int64_t s = 0; s < num_slots; ++s) {
    const unsigned char* want = row_of_slot[s] >= 0 ? rows.data() + row_of_slot[s] * row_bytes
                                                    : before.data() + s * row_bytes;
    if (std::memcmp(after.data() + s * row_bytes, want, row_bytes) != 0)
      return ::testing::AssertionFailure()
             << "slot " << s << (row_of_slot[s] >= 0 ? " does not hold its row" : " changed");
  }
  return ::testing::AssertionSuccess();
}

}  // namespace

TEST(KvWrite, RowsLandInTheirSlotsAndPaddingWritesNothing) {
  const int64_t NB = 5, BS = 3, Hkv = 2, D = 8;
  // Slots in no order, two padding rows; slots 0, 3, 7 and 11..13 are never written.
  const std::vector<int64_t> slots = {14, 1, -1, 2, 9, 8, -1, 4, 5, 6, 10};
  const int64_t N = static_cast<int64_t>(slots.size());
  Generator gen(3);
  for (DType in : {DType::F32, DType::F64, DType::BF16})
    for (DType cache_dtype : {DType::F32, DType::BF16}) {
      const Tensor k = randn({N, Hkv, D}, gen, in), v = randn({N, Hkv, D}, gen, in);
      const Tensor k_cache = randn({NB, BS, Hkv, D}, gen, cache_dtype);
      const Tensor v_cache = Tensor::full({NB, BS, Hkv, D}, NAN, cache_dtype);
      const std::vector<unsigned char> k_before = bytes_of(k_cache), v_before = bytes_of(v_cache);
      ops::kv_write(k, v, i32(slots), k_cache, v_cache);
      // Tensor::to is the project's conversion (F64 → BF16 through F32, nearest even).
      EXPECT_TRUE(written_exactly(k_cache, k_before, k.to(cache_dtype), slots))
          << in << " into " << cache_dtype;
      EXPECT_TRUE(written_exactly(v_cache, v_before, v.to(cache_dtype), slots))
          << in << " into " << cache_dtype;
    }
}

TEST(KvWrite, F32ToBf16RoundsToNearestEven) {
  // BF16 keeps 7 fraction bits: the ulp of [1, 2) is 2^-7.
  const std::vector<double> values = {
      1.0 + std::ldexp(1.0, -8),                         // a tie: to even, 1
      1.0 + std::ldexp(3.0, -8),                         // a tie: to even, 1 + 2^-6
      1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -20),  // above the tie: 1 + 2^-7
      -(2.0 + std::ldexp(1.0, -7)),                      // a tie at ulp 2^-6: to even, -2
      3.0,                                               // exact
      std::ldexp(1.0, -130)};                            // subnormal, exact in BF16
  const std::vector<double> expected = {
      1.0, 1.0 + std::ldexp(1.0, -6), 1.0 + std::ldexp(1.0, -7), -2.0, 3.0, std::ldexp(1.0, -130)};
  const int64_t n = static_cast<int64_t>(values.size());
  const Tensor k = Tensor::from_vector(values, {1, 1, n});
  const Tensor k_cache = Tensor::zeros({2, 1, 1, n}, DType::BF16);
  const Tensor v_cache = Tensor::zeros({2, 1, 1, n}, DType::BF16);
  ops::kv_write(k, k, i32({1}), k_cache, v_cache);
  EXPECT_EQ(k_cache.narrow(0, 1, 1).to_vector_f64(), expected);
  EXPECT_EQ(k_cache.narrow(0, 0, 1).to_vector_f64(), std::vector<double>(n, 0.0));
}

TEST(KvWrite, StridedViewsOfAFusedQkvBuffer) {
  const int64_t N = 6, H = 4, Hkv = 2, D = 16, width = (H + 2 * Hkv) * D;
  Generator gen(5);
  const Tensor qkv = randn({N, width}, gen);  // (N, (H + 2·Hkv)·D)
  const Tensor k = qkv.narrow(1, H * D, Hkv * D).view({N, Hkv, D});
  const Tensor v = qkv.narrow(1, (H + Hkv) * D, Hkv * D).view({N, Hkv, D});
  ASSERT_FALSE(k.is_contiguous());
  const std::vector<int64_t> slots = {3, 0, -1, 7, 5, 2};
  const Tensor k_cache = Tensor::zeros({4, 2, Hkv, D}), v_cache = Tensor::zeros({4, 2, Hkv, D});
  const std::vector<unsigned char> before = bytes_of(k_cache);
  ops::kv_write(k, v, i32(slots), k_cache, v_cache);
  EXPECT_TRUE(written_exactly(k_cache, before, k.contiguous(), slots));
  EXPECT_TRUE(written_exactly(v_cache, before, v.contiguous(), slots));
}

TEST(KvWrite, RejectsBadArgumentsWithClearMessages) {
  const Tensor k = Tensor::zeros({3, 2, 8}), v = Tensor::zeros({3, 2, 8});
  const Tensor kc = Tensor::zeros({4, 2, 2, 8}), vc = Tensor::zeros({4, 2, 2, 8});
  const Tensor slots = i32({0, 1, -1});
  EXPECT_TRUE(throws_error(
      [&] {
        ops::kv_write(k.reshape({3, 16}), v, slots, kc, vc);
      },
      "kv_write", {"'k' must have rank 3", "f32(3, 16)"}));
  EXPECT_TRUE(throws_error(
      [&] {
        ops::kv_write(k, v, slots, kc.reshape({8, 2, 8}), vc);
      },
      "kv_write", {"'k_cache' must have rank 4"}));
  EXPECT_TRUE(throws_error(
      [&] {
        ops::kv_write(Tensor::zeros({3, 1, 8}), Tensor::zeros({3, 1, 8}), slots, kc, vc);
      },
      "kv_write", {"(N, 2, 8)", "k f32(3, 1, 8)"}));
  EXPECT_TRUE(throws_error(
      [&] {
        ops::kv_write(k, Tensor::zeros({3, 2, 8}, DType::F64), slots, kc, vc);
      },
      "kv_write", {"different dtypes"}));
  EXPECT_TRUE(
      throws_error([&] { ops::kv_write(k, v, slots, kc.to(DType::F16), vc.to(DType::F16)); },
                   "kv_write", {"KV caches must be f32 or bf16", "f16(4, 2, 2, 8)"}));
  EXPECT_TRUE(throws_error(
      [&] {
        ops::kv_write(k, v, slots, kc, Tensor::zeros({4, 2, 2, 4}));
      },
      "kv_write", {"k_cache and v_cache must both be (NB, BS, Hkv, D)"}));
  EXPECT_TRUE(throws_error([&] { ops::kv_write(k, v, slots.to(DType::I64), kc, vc); }, "kv_write",
                           {"'slot_mapping' must be i32", "i64(3,)"}));
  EXPECT_TRUE(throws_error(
      [&] {
        ops::kv_write(k, v, i32({0, 1}), kc, vc);
      },
      "kv_write", {"slot_mapping must be (N) = (3)", "i32(2,)"}));
  EXPECT_TRUE(throws_error(
      [&] { ops::kv_write(k.transpose(1, 2).contiguous().transpose(1, 2), v, slots, kc, vc); },
      "kv_write", {"'k' needs dense (2, 8) rows", "strides (16, 1, 2)"}));
  EXPECT_TRUE(
      throws_error([&] { ops::kv_write(k, v, slots, kc.transpose(0, 1), vc.transpose(0, 1)); },
                   "kv_write", {"KV caches must be dense"}));
}
