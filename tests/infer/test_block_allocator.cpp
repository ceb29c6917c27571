// BlockAllocator: LIFO order, reference counts, exhaustion without throwing, the error paths,
// and a random sequence of operations against a naive model (a set of free ids + counts).
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>
#include <vector>

#include "core/expect_error.h"
#include "microllm/infer/block_allocator.h"

namespace microllm::testing {
namespace {

using infer::BlockAllocator;

TEST(BlockAllocator, FreshPoolHandsOutIdsInOrderThenReportsExhaustion) {
  BlockAllocator a(3);
  EXPECT_EQ(a.num_blocks(), 3);
  EXPECT_EQ(a.num_free(), 3);
  EXPECT_TRUE(a.can_allocate(3));
  EXPECT_FALSE(a.can_allocate(4));
  EXPECT_EQ(a.allocate(), 0);
  EXPECT_EQ(a.allocate(), 1);
  EXPECT_EQ(a.allocate(), 2);
  EXPECT_EQ(a.allocate(), std::nullopt);  // exhausted: no throw
  EXPECT_EQ(a.num_used(), 3);
  EXPECT_EQ(a.num_free(), 0);
  EXPECT_TRUE(a.can_allocate(0));
  EXPECT_FALSE(a.can_allocate(1));
}

TEST(BlockAllocator, FreeListIsLastInFirstOut) {
  BlockAllocator a(4);
  for (int i = 0; i < 4; ++i) ASSERT_EQ(a.allocate(), i);
  a.decref(1);
  a.decref(3);
  EXPECT_EQ(a.allocate(), 3);  // the last freed comes back first
  EXPECT_EQ(a.allocate(), 1);
  EXPECT_EQ(a.allocate(), std::nullopt);
}

TEST(BlockAllocator, SharedBlockIsFreedAtTheLastDecref) {
  BlockAllocator a(2);
  const int32_t b = *a.allocate();
  EXPECT_EQ(a.ref_count(b), 1);
  a.incref(b);
  a.incref(b);
  EXPECT_EQ(a.ref_count(b), 3);
  a.decref(b);
  a.decref(b);
  EXPECT_EQ(a.ref_count(b), 1);
  EXPECT_EQ(a.num_used(), 1);
  a.decref(b);
  EXPECT_EQ(a.ref_count(b), 0);
  EXPECT_EQ(a.num_used(), 0);
  EXPECT_EQ(a.num_free(), 2);
}

TEST(BlockAllocator, ErrorsNameTheBlockAndTheProblem) {
  EXPECT_TRUE(throws_error([] { BlockAllocator(0); }, "block allocator", {"num_blocks", "got 0"}));
  BlockAllocator a(2);
  const int32_t b = *a.allocate();
  a.decref(b);
  EXPECT_TRUE(
      throws_error([&] { a.decref(b); }, "block allocator", {"decref", "block 0", "double free"}));
  EXPECT_TRUE(throws_error([&] { a.incref(1); }, "block allocator", {"incref", "block 1", "free"}));
  EXPECT_TRUE(throws_error([&] { a.decref(2); }, "block allocator", {"block id 2", "[0, 2)"}));
  EXPECT_TRUE(throws_error([&] { a.incref(-1); }, "block allocator", {"block id -1"}));
  EXPECT_TRUE(throws_error([&] { a.ref_count(7); }, "block allocator", {"block id 7"}));
  EXPECT_EQ(a.num_free(), 2);  // the failed calls changed nothing
}

// Random allocate / incref / decref against a naive model; the LIFO order is checked by
// the model's own stack.
TEST(BlockAllocator, RandomOperationsMatchANaiveModel) {
  constexpr int32_t kBlocks = 17;
  BlockAllocator a(kBlocks);
  std::vector<int32_t> model_free;  // back = next handed out
  for (int32_t b = kBlocks - 1; b >= 0; --b) model_free.push_back(b);
  std::map<int32_t, int32_t> model_refs;
  std::mt19937 rng(11);
  for (int op = 0; op < 5000; ++op) {
    const int kind = static_cast<int>(rng() % 3);
    if (kind == 0) {
      const std::optional<int32_t> got = a.allocate();
      if (model_free.empty()) {
        ASSERT_EQ(got, std::nullopt);
      } else {
        ASSERT_EQ(got, model_free.back());
        model_refs[model_free.back()] = 1;
        model_free.pop_back();
      }
    } else if (!model_refs.empty()) {
      auto it = model_refs.begin();
      std::advance(it, static_cast<long>(rng() % model_refs.size()));
      if (kind == 1) {
        a.incref(it->first);
        ++it->second;
      } else {
        a.decref(it->first);
        if (--it->second == 0) {
          model_free.push_back(it->first);
          model_refs.erase(it);
        }
      }
    }
    ASSERT_EQ(a.num_free(), static_cast<int32_t>(model_free.size()));
    ASSERT_EQ(a.num_used(), static_cast<int32_t>(model_refs.size()));
  }
  for (int32_t b = 0; b < kBlocks; ++b)
    EXPECT_EQ(a.ref_count(b), model_refs.contains(b) ? model_refs[b] : 0) << "block " << b;
}

}  // namespace
}  // namespace microllm::testing
