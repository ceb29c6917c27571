// PrefixCache: full KV blocks kept after their sequences let go of them, found again by the
// tokens they hold, so that a request whose prompt starts with a cached prefix skips its
// prefill (INFERENCE.md, DESIGN §7). It sits on the BlockAllocator and becomes the one
// place blocks are taken from and given back to.
//
// Keys. Block i of a token sequence holds tokens [i·BS, (i+1)·BS). Its key is a chained
// 64-bit hash: key(i) = mix(key(i−1), its BS ids), key(−1) a constant, so a key stands for
// the whole prefix up to the block's end. The cache is one engine's (one model, one KV
// dtype), so the model needs no place in the key. A hit is exact, not only probable: the
// entry's own ids are compared, and its parent must be the block matched for i−1, still
// holding the prefix it held when the entry was made (a generation count per block, bumped
// whenever a block leaves the cache). A hash collision can cost a hit, never give a wrong one.
//
// Holders. A cached block has one reference of the cache's own besides those of the
// sequences using it. When the cache is its only holder it is evictable, in the order it
// got there (least recent first). allocate() takes a free block first, else evicts the
// least recently released block. Deterministic: the same calls give the same ids.
// With `enabled` false nothing is ever inserted: allocate and release are the allocator's.
// Reference: vLLM's KVCacheManager / BlockPool (hash chain, free queue), read, not copied.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <span>
#include <unordered_map>
#include <vector>

#include "microllm/infer/block_allocator.h"

namespace microllm::infer {

class PrefixCache {
 public:
  PrefixCache(BlockAllocator& allocator, int32_t block_size, bool enabled);

  // The cached blocks of the leading full blocks of `tokens`, at most max_blocks, in order;
  // the first miss ends the match. Changes nothing.
  std::vector<int32_t> lookup(std::span<const int32_t> tokens, int64_t max_blocks) const;
  // How many of `blocks` only the cache holds (acquiring them makes them unavailable).
  int64_t num_evictable_among(std::span<const int32_t> blocks) const;
  // The caller becomes a holder of each of `blocks` (from lookup); they stop being evictable.
  void acquire(std::span<const int32_t> blocks);

  // A free block with the caller as its one holder, else the least recently released
  // evictable block (its entry dropped); nullopt when neither exists (never throws).
  std::optional<int32_t> allocate();
  // The caller lets go of `block`; a cached block left with the cache as its only holder
  // becomes evictable (most recent). Release a sequence's blocks last to first, so that
  // the ends of prefixes are evicted before their beginnings.
  void release(int32_t block);

  // Offers `block` (a holder's, with K/V for `block_tokens`, BS ids) as the cached block of
  // its prefix; `parent` is the cached block of the prefix one block shorter (−1 for the
  // first block). True when `block` is, or now is, the cached block of that prefix; false
  // when the cache is disabled, another block holds the prefix or `parent` is not cached
  // (the caller stops offering this sequence's later blocks).
  bool insert(std::span<const int32_t> block_tokens, int32_t block, int32_t parent);

  bool enabled() const { return enabled_; }
  int64_t num_available() const;  // free + evictable: what allocate() can still hand out
  int64_t num_cached() const { return static_cast<int64_t>(index_.size()); }
  int64_t num_evictable() const { return static_cast<int64_t>(evictable_.size()); }
  bool is_cached(int32_t block) const;

 private:
  struct Entry {
    uint64_t key = 0;
    int32_t parent = -1;       // the cached block of the prefix one block shorter, or −1
    uint32_t parent_gen = 0;   // generation_[parent] when the entry was made
    uint64_t released_at = 0;  // tick when it became evictable (its place in evictable_)
    bool cached = false;
  };
  uint64_t key_of(uint64_t parent_key, std::span<const int32_t> block_tokens) const;
  bool parent_holds(const Entry& e) const;  // e's parent is cached, with the same prefix
  void drop(int32_t block);                 // removes the entry, gives back the cache's hold

  BlockAllocator& allocator_;
  int32_t block_size_;
  bool enabled_;
  std::vector<Entry> entries_;                   // (NB) per block
  std::vector<uint32_t> generation_;             // (NB) bumped when a block leaves the cache
  std::vector<int32_t> tokens_;                  // (NB·BS) ids of cached blocks (enabled only)
  std::unordered_map<uint64_t, int32_t> index_;  // key → cached block
  std::set<std::pair<uint64_t, int32_t>> evictable_;  // (released_at, block), oldest first
  uint64_t tick_ = 0;
};

}  // namespace microllm::infer
