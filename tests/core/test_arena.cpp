// Arena: aligned, disjoint views of one storage; the overflow error; reset reuse; the
// planner (measure) whose used() sizes a real arena exactly. Expected sizes are the dense
// byte counts rounded up to 256 by hand.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "core/expect_error.h"
#include "microllm/core/arena.h"

using namespace microllm;
using microllm::testing::throws_error;

namespace {

uintptr_t address(const Tensor& t) { return reinterpret_cast<uintptr_t>(t.raw_data()); }

struct Request {
  Shape shape;
  DType dtype;
};

// Odd shapes and every element width: 60, 2000, 8, 0, 4096 and 3·7·11·8 = 1848 bytes.
const std::vector<Request> kRequests = {{{3, 5}, DType::F32},  {{1000}, DType::BF16},
                                        {{1}, DType::I64},     {{0, 4}, DType::F32},
                                        {{64, 64}, DType::U8}, {{3, 7, 11}, DType::F64}};

}  // namespace

TEST(Arena, AlignedBytesRoundsTheDenseSizeUpTo256) {
  EXPECT_EQ(Arena::aligned_bytes({3, 5}, DType::F32), 256);    // 60 bytes
  EXPECT_EQ(Arena::aligned_bytes({1000}, DType::BF16), 2048);  // 2000 bytes
  EXPECT_EQ(Arena::aligned_bytes({64}, DType::F32), 256);      // exactly 256
  EXPECT_EQ(Arena::aligned_bytes({65}, DType::F32), 512);      // 260 bytes
  EXPECT_EQ(Arena::aligned_bytes({0, 4}, DType::F32), 0);
  EXPECT_EQ(Arena::aligned_bytes({}, DType::I64), 256);  // a scalar
}

TEST(Arena, ViewsAreAlignedDisjointAndShareTheOneStorage) {
  Arena arena(1 << 16, Device::cpu());
  std::vector<Tensor> views;
  for (const Request& r : kRequests) views.push_back(arena.take(r.shape, r.dtype));
  const auto* base = static_cast<const char*>(arena.storage()->data());
  const auto* end = base + arena.storage()->nbytes();
  std::vector<std::pair<uintptr_t, uintptr_t>> ranges;
  for (size_t i = 0; i < views.size(); ++i) {
    const Tensor& v = views[i];
    EXPECT_EQ(v.shape(), kRequests[i].shape);
    EXPECT_EQ(v.dtype(), kRequests[i].dtype);
    EXPECT_TRUE(v.is_contiguous());
    EXPECT_EQ(v.storage().get(), arena.storage().get()) << "view " << i;
    EXPECT_EQ(address(v) % 256, 0u) << "view " << i << " at " << v.raw_data();
    EXPECT_GE(address(v), reinterpret_cast<uintptr_t>(base));
    EXPECT_LE(address(v) + v.nbytes(), reinterpret_cast<uintptr_t>(end));
    if (v.nbytes() > 0) ranges.emplace_back(address(v), address(v) + v.nbytes());
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i)
    EXPECT_LE(ranges[i - 1].second, ranges[i].first) << "views overlap";
  // 256 + 2048 + 256 + 0 + 4096 + 2048
  EXPECT_EQ(arena.used(), 8704);
  EXPECT_EQ(arena.remaining(), (1 << 16) - 8704);
}

TEST(Arena, WritesThroughOneViewLeaveTheOthersAlone) {
  Arena arena(4096, Device::cpu());
  Tensor a = arena.take({7}, DType::F32);     // (7)
  Tensor b = arena.take({3, 3}, DType::F32);  // (3, 3)
  Tensor c = arena.take({5}, DType::I32);     // (5)
  a.fill(1.0);
  b.fill(2.0);
  c.fill(3.0);
  for (double v : a.to_vector_f64()) EXPECT_EQ(v, 1.0);
  for (double v : b.to_vector_f64()) EXPECT_EQ(v, 2.0);
  for (double v : c.to_vector_f64()) EXPECT_EQ(v, 3.0);
}

TEST(Arena, OverflowNamesTheRequestAndTheRemainingBytes) {
  Arena arena(1000, Device::cpu());
  arena.take({100}, DType::F32, "hidden");  // 400 → 512 bytes
  EXPECT_TRUE(
      throws_error([&] { arena.take({100}, DType::F32, "logits"); }, "arena",
                   {"'logits'", "f32(100,)", "needs 512 bytes", "only 488 of 1000", "512 used"}));
  // The failed take consumed nothing: a request that fits still succeeds.
  EXPECT_EQ(arena.used(), 512);
  EXPECT_EQ(arena.take({60}, DType::F32).numel(), 60);  // 240 → 256 ≤ 488
  EXPECT_EQ(arena.used(), 768);
  EXPECT_TRUE(throws_error([&] { arena.take({1}, DType::I8); }, "arena",
                           {"i8(1,)", "needs 256 bytes", "only 232 of 1000"}));
}

TEST(Arena, ResetHandsOutTheSameMemoryAgain) {
  Arena arena(8192, Device::cpu());
  const Tensor first = arena.take({10, 10}, DType::F32);  // (10, 10)
  const Tensor second = arena.take({33}, DType::BF16);    // (33)
  const void* first_ptr = first.raw_data();
  const void* second_ptr = second.raw_data();
  arena.reset();
  EXPECT_EQ(arena.used(), 0);
  EXPECT_EQ(arena.capacity(), 8192);
  EXPECT_EQ(arena.take({10, 10}, DType::F32).raw_data(), first_ptr);
  EXPECT_EQ(arena.take({33}, DType::BF16).raw_data(), second_ptr);
  // Another shape of the same size class lands at the same offsets too.
  arena.reset();
  EXPECT_EQ(arena.take({25, 4}, DType::I32).raw_data(), first_ptr);
}

TEST(Arena, APlannerMeasuresWhatARealArenaThenServesExactly) {
  Arena planner = Arena::measure();
  EXPECT_TRUE(planner.measuring());
  std::vector<Tensor> planned;
  for (const Request& r : kRequests) planned.push_back(planner.take(r.shape, r.dtype));
  int64_t expected = 0;
  for (const Request& r : kRequests) expected += Arena::aligned_bytes(r.shape, r.dtype);
  EXPECT_EQ(planner.used(), expected);
  EXPECT_EQ(planner.used(), 8704);
  EXPECT_EQ(planner.storage(), nullptr);  // no memory behind a planner
  for (size_t i = 0; i < planned.size(); ++i) {
    EXPECT_EQ(planned[i].shape(), kRequests[i].shape);
    EXPECT_EQ(planned[i].dtype(), kRequests[i].dtype);
    EXPECT_EQ(planned[i].raw_data(), nullptr);
  }
  Arena arena(planner.used(), Device::cpu());
  for (const Request& r : kRequests) arena.take(r.shape, r.dtype);
  EXPECT_EQ(arena.remaining(), 0);
  EXPECT_TRUE(throws_error([&] { arena.take({1}, DType::F32); }, "arena", {"only 0 of 8704"}));
}

TEST(Arena, MovingHandsTheStorageOver) {
  Arena first(1024, Device::cpu());
  const Tensor view = first.take({4}, DType::F32);  // (4)
  Arena second = std::move(first);
  EXPECT_EQ(second.capacity(), 1024);
  EXPECT_EQ(second.used(), 256);
  EXPECT_EQ(second.storage().get(), view.storage().get());
  EXPECT_EQ(first.capacity(), 0);  // NOLINT(bugprone-use-after-move): moved-from is empty
  EXPECT_TRUE(throws_error([&] { first.take({1}, DType::F32); }, "arena", {"only 0 of 0"}));
}

TEST(Arena, EmptyAndNegativeArenas) {
  Arena empty;
  EXPECT_EQ(empty.capacity(), 0);
  EXPECT_EQ(empty.take({0}, DType::F32).numel(), 0);
  EXPECT_TRUE(throws_error([&] { empty.take({1}, DType::F32); }, "arena", {"only 0 of 0"}));
  EXPECT_TRUE(throws_error([] { Arena(-1, Device::cpu()); }, "arena", {"found -1"}));
  EXPECT_TRUE(throws_error(
      [] {
        Arena::aligned_bytes({2, -3}, DType::F32);
      },
      "arena", {"(2, -3)"}));
}
