// PrefixCache: chained lookups stop at the first miss, hits are exact (a block whose parent
// left the cache is not reached, a different parent is not confused for the same one),
// evictable blocks are handed out least recently released first and only when no block is
// free, holders keep blocks out of eviction, a disabled cache caches nothing; then random
// operations against a naive model that remembers the whole prefix each block was cached for.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>
#include <vector>

#include "core/expect_error.h"
#include "microllm/infer/prefix_cache.h"

namespace microllm::testing {
namespace {

using infer::BlockAllocator;
using infer::PrefixCache;
using Ids = std::vector<int32_t>;

// Allocates one block per full block of `tokens` and offers them to the cache in order,
// as a sequence that prefilled `tokens` does; returns the blocks (the caller holds them).
std::vector<int32_t> prefill(PrefixCache& cache, const Ids& tokens, int32_t bs) {
  std::vector<int32_t> blocks;
  for (size_t i = 0; i + static_cast<size_t>(bs) <= tokens.size(); i += static_cast<size_t>(bs)) {
    const std::optional<int32_t> b = cache.allocate();
    EXPECT_TRUE(b.has_value());
    blocks.push_back(*b);
    const std::span<const int32_t> ids(tokens.data() + i, static_cast<size_t>(bs));
    cache.insert(ids, *b, blocks.size() == 1 ? -1 : blocks[blocks.size() - 2]);
  }
  return blocks;
}

void release_all(PrefixCache& cache, const std::vector<int32_t>& blocks) {
  for (auto b = blocks.rbegin(); b != blocks.rend(); ++b) cache.release(*b);
}

TEST(PrefixCache, LookupFollowsTheChainAndStopsAtTheFirstMiss) {
  BlockAllocator a(8);
  PrefixCache cache(a, 2, true);
  const Ids t = {1, 2, 3, 4, 5, 6, 7};
  const std::vector<int32_t> blocks = prefill(cache, t, 2);  // 3 full blocks
  ASSERT_EQ(blocks.size(), 3u);
  EXPECT_EQ(cache.num_cached(), 3);
  EXPECT_EQ(cache.lookup(t, 10), blocks);
  EXPECT_EQ(cache.lookup(t, 2), std::vector<int32_t>(blocks.begin(), blocks.begin() + 2));
  EXPECT_EQ(cache.lookup(Ids{1, 2, 3, 9, 5, 6}, 10), std::vector<int32_t>{blocks[0]});
  EXPECT_TRUE(cache.lookup(Ids{9, 2, 3, 4}, 10).empty());
  // The same ids after another first block are another prefix.
  EXPECT_TRUE(cache.lookup(Ids{3, 4, 5, 6}, 10).empty());
  EXPECT_TRUE(cache.lookup(Ids{1}, 10).empty());  // no full block
  // Held by the caller and the cache: nothing is evictable or free beyond the rest.
  EXPECT_EQ(cache.num_evictable(), 0);
  EXPECT_EQ(cache.num_available(), 5);
  release_all(cache, blocks);
  EXPECT_EQ(cache.num_evictable(), 3);
  EXPECT_EQ(cache.num_available(), 8);
  EXPECT_EQ(a.num_used(), 3);  // the cache's own holds
}

TEST(PrefixCache, EvictsLeastRecentlyReleasedOnlyWhenNothingIsFree) {
  BlockAllocator a(4);
  PrefixCache cache(a, 1, true);
  const std::vector<int32_t> first = prefill(cache, {10, 11}, 1);   // blocks 0, 1
  const std::vector<int32_t> second = prefill(cache, {20, 21}, 1);  // blocks 2, 3
  release_all(cache, first);                                        // 1 then 0
  release_all(cache, second);                                       // 3 then 2
  EXPECT_EQ(a.num_free(), 0);
  EXPECT_EQ(cache.num_available(), 4);
  // A holder of sequence 2's prefix keeps its blocks from eviction.
  const std::vector<int32_t> hit = cache.lookup(Ids{20, 21}, 2);
  ASSERT_EQ(hit, second);
  EXPECT_EQ(cache.num_evictable_among(hit), 2);
  cache.acquire(hit);
  EXPECT_EQ(cache.num_available(), 2);
  EXPECT_EQ(cache.allocate(), 1);  // released first: the end of the first chain
  EXPECT_EQ(cache.allocate(), 0);
  EXPECT_EQ(cache.allocate(), std::nullopt);
  EXPECT_TRUE(cache.lookup(Ids{10, 11}, 2).empty());
  EXPECT_FALSE(cache.is_cached(0));
  EXPECT_TRUE(cache.is_cached(2));
  cache.release(0);
  cache.release(1);
  EXPECT_EQ(a.num_free(), 2);  // no longer cached: plain free blocks
}

TEST(PrefixCache, AChildWhoseParentLeftTheCacheIsNotReached) {
  BlockAllocator a(3);
  PrefixCache cache(a, 2, true);
  const std::vector<int32_t> blocks = prefill(cache, {1, 2, 3, 4}, 2);  // 0, 1
  release_all(cache, blocks);                                           // 1 released first, then 0
  cache.acquire(std::vector<int32_t>{blocks[1]});  // someone holds the child only
  EXPECT_EQ(cache.allocate(), 2);                  // the free one
  EXPECT_EQ(cache.allocate(), 0);                  // evicts the parent: 1 is now unreachable
  EXPECT_TRUE(cache.lookup(Ids{1, 2, 3, 4}, 2).empty());
  // Block 0 refilled with the same first ids and offered again: the old child still does
  // not count (its parent's prefix was replaced), a new child takes its place.
  EXPECT_TRUE(cache.insert(Ids{1, 2}, 0, -1));
  EXPECT_EQ(cache.lookup(Ids{1, 2, 3, 4}, 2), std::vector<int32_t>{0});
  EXPECT_TRUE(cache.insert(Ids{3, 4}, 2, 0));
  EXPECT_EQ(cache.lookup(Ids{1, 2, 3, 4}, 2), (std::vector<int32_t>{0, 2}));
  EXPECT_FALSE(cache.is_cached(1));
}

TEST(PrefixCache, OneBlockPerPrefixAndErrors) {
  BlockAllocator a(4);
  PrefixCache cache(a, 2, true);
  const std::vector<int32_t> first = prefill(cache, {1, 2}, 2);
  const int32_t copy = *cache.allocate();  // computed the same prefix at the same time
  EXPECT_FALSE(cache.insert(Ids{1, 2}, copy, -1));
  EXPECT_FALSE(cache.insert(Ids{3, 4}, *cache.allocate(), copy));  // parent not cached
  EXPECT_TRUE(cache.insert(Ids{1, 2}, first[0], -1));              // already the cached block
  EXPECT_EQ(cache.num_cached(), 1);
  EXPECT_TRUE(throws_error([&] { cache.insert(Ids{1}, first[0], -1); }, "prefix cache",
                           {"expected 2 token ids", "got 1"}));
  EXPECT_TRUE(throws_error(
      [&] {
        cache.insert(Ids{1, 2}, 3, -1);
      },
      "prefix cache", {"block 3 is free"}));
  EXPECT_TRUE(throws_error([&] { cache.acquire(std::vector<int32_t>{copy}); }, "prefix cache",
                           {"not cached"}));
  EXPECT_TRUE(throws_error([&] { PrefixCache(a, 0, true); }, "prefix cache", {"block_size"}));
}

TEST(PrefixCache, DisabledCachesNothing) {
  BlockAllocator a(2);
  PrefixCache cache(a, 2, false);
  const std::vector<int32_t> blocks = prefill(cache, {1, 2, 3, 4}, 2);
  EXPECT_EQ(cache.num_cached(), 0);
  EXPECT_TRUE(cache.lookup(Ids{1, 2, 3, 4}, 2).empty());
  release_all(cache, blocks);
  EXPECT_EQ(a.num_free(), 2);
}

// Random prefills over a small vocabulary (many shared prefixes), releases, lookups and
// evictions: every hit is a block cached for exactly the queried prefix, hits are as long
// as the naive model allows (no cached prefix is missed while its chain is intact), and
// the counts add up.
TEST(PrefixCache, RandomOperationsHitOnlyTheirOwnPrefix) {
  for (uint32_t seed = 1; seed <= 20; ++seed) {
    std::mt19937 rng(seed);
    const int32_t bs = 1 + static_cast<int32_t>(rng() % 3);
    BlockAllocator a(12);
    PrefixCache cache(a, bs, true);
    std::map<int32_t, Ids> prefix_of;           // cached block → the whole prefix it ends
    std::vector<std::vector<int32_t>> holders;  // live sequences' blocks
    const auto forget_evicted = [&] {
      for (auto it = prefix_of.begin(); it != prefix_of.end();)
        it = cache.is_cached(it->first) ? std::next(it) : prefix_of.erase(it);
    };
    const auto random_tokens = [&] {
      Ids t(static_cast<size_t>(rng() % 10));
      for (int32_t& id : t) id = static_cast<int32_t>(rng() % 3);
      return t;
    };
    for (int op = 0; op < 400; ++op) {
      const uint32_t kind = rng() % 3;
      if (kind == 0 && !holders.empty()) {  // a sequence ends
        const size_t i = rng() % holders.size();
        release_all(cache, holders[i]);
        holders.erase(holders.begin() + static_cast<std::ptrdiff_t>(i));
        continue;
      }
      const Ids t = random_tokens();
      const std::vector<int32_t> hit = cache.lookup(t, 100);
      for (size_t i = 0; i < hit.size(); ++i) {
        ASSERT_TRUE(cache.is_cached(hit[i]));
        ASSERT_EQ(prefix_of.at(hit[i]), Ids(t.begin(), t.begin() + (i + 1) * bs))
            << "seed " << seed << " op " << op;
      }
      if (kind == 1) continue;  // a lookup only
      // A sequence: the hit, then fresh blocks for the rest of its full blocks.
      const int64_t full = static_cast<int64_t>(t.size()) / bs;
      if (cache.num_available() - cache.num_evictable_among(hit) <
          full - static_cast<int64_t>(hit.size()))
        continue;
      cache.acquire(hit);
      std::vector<int32_t> blocks = hit;
      bool chain = true;
      for (int64_t i = static_cast<int64_t>(hit.size()); i < full; ++i) {
        const int32_t b = *cache.allocate();
        forget_evicted();
        blocks.push_back(b);
        const std::span<const int32_t> ids(t.data() + i * bs, static_cast<size_t>(bs));
        if (chain && cache.insert(ids, b, i == 0 ? -1 : blocks[static_cast<size_t>(i - 1)]))
          prefix_of[b] = Ids(t.begin(), t.begin() + (i + 1) * bs);
        else
          chain = false;
        forget_evicted();  // an insert may replace a stale entry
      }
      holders.push_back(blocks);
      // The naive model: the longest run of cached prefixes of t; lookup finds at least
      // the part whose blocks form one unbroken chain (it stops where a parent left).
      ASSERT_GE(cache.lookup(t, 100).size(), hit.size());
      int64_t held = 0;
      for (const auto& h : holders) held += static_cast<int64_t>(h.size());
      ASSERT_LE(a.num_used(), held + cache.num_cached());
      ASSERT_EQ(cache.num_cached(), static_cast<int64_t>(prefix_of.size()));
    }
    for (const auto& h : holders) release_all(cache, h);
    EXPECT_EQ(cache.num_available(), 12);
    EXPECT_EQ(a.num_used(), cache.num_cached());
    EXPECT_EQ(cache.num_evictable(), cache.num_cached());
  }
}

}  // namespace
}  // namespace microllm::testing
