// BlockAllocator: LIFO free list + reference counts over NB block ids.
#include "microllm/infer/block_allocator.h"

#include "microllm/core/error.h"

namespace microllm::infer {
namespace {
constexpr const char* kOp = "block allocator";
}  // namespace

BlockAllocator::BlockAllocator(int32_t num_blocks) {
  MICROLLM_CHECK(num_blocks >= 1, kOp, "num_blocks must be >= 1, got ", num_blocks);
  ref_counts_.assign(static_cast<size_t>(num_blocks), 0);
  // Pushed in reverse so that the first allocations return 0, 1, 2, ...
  free_.reserve(static_cast<size_t>(num_blocks));
  for (int32_t b = num_blocks - 1; b >= 0; --b) free_.push_back(b);
}

std::optional<int32_t> BlockAllocator::allocate() {
  if (free_.empty()) return std::nullopt;
  const int32_t b = free_.back();
  free_.pop_back();
  ref_counts_[static_cast<size_t>(b)] = 1;
  return b;
}

void BlockAllocator::check_id(int32_t block, const char* what) const {
  MICROLLM_CHECK(block >= 0 && block < num_blocks(), kOp, what, ": block id ", block,
                 " is outside [0, ", num_blocks(), ")");
}

void BlockAllocator::incref(int32_t block) {
  check_id(block, "incref");
  int32_t& count = ref_counts_[static_cast<size_t>(block)];
  MICROLLM_CHECK(count > 0, kOp, "incref: block ", block, " is free (allocate it first)");
  ++count;
}

void BlockAllocator::decref(int32_t block) {
  check_id(block, "decref");
  int32_t& count = ref_counts_[static_cast<size_t>(block)];
  MICROLLM_CHECK(count > 0, kOp, "decref: block ", block, " is already free (double free)");
  if (--count == 0) free_.push_back(block);
}

int32_t BlockAllocator::ref_count(int32_t block) const {
  check_id(block, "ref_count");
  return ref_counts_[static_cast<size_t>(block)];
}

}  // namespace microllm::infer
