// PrefixCache: chained block keys, exact hits, LRU eviction of blocks only the cache holds.
#include "microllm/infer/prefix_cache.h"

#include <algorithm>

#include "microllm/core/error.h"
#include "microllm/core/hash.h"

namespace microllm::infer {
namespace {

constexpr const char* kOp = "prefix cache";
constexpr uint64_t kRootKey = 0x6D6963726F6C6C6Dull;  // key(−1)
constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ull;

constexpr auto mix = splitmix64_mix;

}  // namespace

PrefixCache::PrefixCache(BlockAllocator& allocator, int32_t block_size, bool enabled)
    : allocator_(allocator), block_size_(block_size), enabled_(enabled) {
  MICROLLM_CHECK(block_size >= 1, kOp, "block_size must be >= 1, got ", block_size);
  const size_t nb = static_cast<size_t>(allocator.num_blocks());
  entries_.resize(nb);
  generation_.assign(nb, 0);
  if (enabled_) tokens_.assign(nb * static_cast<size_t>(block_size), -1);
}

uint64_t PrefixCache::key_of(uint64_t parent_key, std::span<const int32_t> block_tokens) const {
  uint64_t h = mix(parent_key + kGolden);
  for (const int32_t t : block_tokens) h = mix(h ^ (static_cast<uint32_t>(t) + kGolden));
  return h;
}

bool PrefixCache::parent_holds(const Entry& e) const {
  if (e.parent < 0) return true;
  return entries_[static_cast<size_t>(e.parent)].cached &&
         generation_[static_cast<size_t>(e.parent)] == e.parent_gen;
}

bool PrefixCache::is_cached(int32_t block) const {
  MICROLLM_CHECK(block >= 0 && block < allocator_.num_blocks(), kOp, "block id ", block,
                 " is outside [0, ", allocator_.num_blocks(), ")");
  return entries_[static_cast<size_t>(block)].cached;
}

std::vector<int32_t> PrefixCache::lookup(std::span<const int32_t> tokens,
                                         int64_t max_blocks) const {
  std::vector<int32_t> hit;
  if (!enabled_) return hit;
  const int64_t full = static_cast<int64_t>(tokens.size()) / block_size_;
  uint64_t key = kRootKey;
  int32_t parent = -1;
  for (int64_t i = 0; i < std::min(full, max_blocks); ++i) {
    const std::span<const int32_t> ids =
        tokens.subspan(static_cast<size_t>(i * block_size_), static_cast<size_t>(block_size_));
    key = key_of(key, ids);
    const auto it = index_.find(key);
    if (it == index_.end()) break;
    const int32_t b = it->second;
    const Entry& e = entries_[static_cast<size_t>(b)];
    if (e.parent != parent || !parent_holds(e)) break;
    const auto held = tokens_.begin() + static_cast<std::ptrdiff_t>(b) * block_size_;
    if (!std::equal(ids.begin(), ids.end(), held)) break;
    hit.push_back(b);
    parent = b;
  }
  return hit;
}

int64_t PrefixCache::num_evictable_among(std::span<const int32_t> blocks) const {
  int64_t n = 0;
  for (const int32_t b : blocks)
    n += entries_[static_cast<size_t>(b)].cached && allocator_.ref_count(b) == 1;
  return n;
}

void PrefixCache::acquire(std::span<const int32_t> blocks) {
  for (const int32_t b : blocks) {
    Entry& e = entries_[static_cast<size_t>(b)];
    MICROLLM_CHECK(e.cached, kOp, "acquire: block ", b, " is not cached");
    if (allocator_.ref_count(b) == 1) evictable_.erase({e.released_at, b});
    allocator_.incref(b);
  }
}

std::optional<int32_t> PrefixCache::allocate() {
  if (allocator_.num_free() == 0 && !evictable_.empty()) drop(evictable_.begin()->second);
  return allocator_.allocate();
}

void PrefixCache::release(int32_t block) {
  allocator_.decref(block);
  Entry& e = entries_[static_cast<size_t>(block)];
  if (e.cached && allocator_.ref_count(block) == 1) {
    e.released_at = ++tick_;
    evictable_.insert({e.released_at, block});
  }
}

bool PrefixCache::insert(std::span<const int32_t> block_tokens, int32_t block, int32_t parent) {
  MICROLLM_CHECK(static_cast<int64_t>(block_tokens.size()) == block_size_, kOp, "insert: expected ",
                 block_size_, " token ids (one block), got ", block_tokens.size());
  MICROLLM_CHECK(allocator_.ref_count(block) > 0, kOp, "insert: block ", block, " is free");
  if (!enabled_) return false;
  Entry& e = entries_[static_cast<size_t>(block)];
  if (e.cached) return true;  // a hit: already the cached block of this prefix
  if (parent >= 0 && !entries_[static_cast<size_t>(parent)].cached) return false;
  const uint64_t key =
      key_of(parent < 0 ? kRootKey : entries_[static_cast<size_t>(parent)].key, block_tokens);
  if (const auto it = index_.find(key); it != index_.end()) {
    const Entry& other = entries_[static_cast<size_t>(it->second)];
    if (other.parent == parent && parent_holds(other)) return false;  // held by another block
    drop(it->second);  // a stale entry (its prefix is gone) or a collision: the newer wins
  }
  e.key = key;
  e.parent = parent;
  e.parent_gen = parent < 0 ? 0 : generation_[static_cast<size_t>(parent)];
  e.cached = true;
  std::copy(block_tokens.begin(), block_tokens.end(),
            tokens_.begin() + static_cast<std::ptrdiff_t>(block) * block_size_);
  index_.emplace(key, block);
  allocator_.incref(block);  // the cache's own hold
  return true;
}

void PrefixCache::drop(int32_t block) {
  Entry& e = entries_[static_cast<size_t>(block)];
  if (allocator_.ref_count(block) == 1) evictable_.erase({e.released_at, block});
  index_.erase(e.key);
  e.cached = false;
  ++generation_[static_cast<size_t>(block)];
  allocator_.decref(block);
}

int64_t PrefixCache::num_available() const { return allocator_.num_free() + num_evictable(); }

}  // namespace microllm::infer
