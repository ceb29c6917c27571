// BlockAllocator: the fixed pool of NB KV-cache blocks (each BS token slots in every layer's
// K and V pools [NB, BS, Hkv, D]) handed out by id, with reference counts so that sequences
// sharing a prefix (prefix cache, n > 1) can share blocks. Host bookkeeping only: no tensors.
//
// Free list: LIFO. A fresh allocator hands out 0, 1, 2, ...; a freed block is the next one
// handed out (its lines are the likeliest to still be in L2). Deterministic: the same calls
// give the same ids.
// Reference: nano-vllm block_manager.py and vLLM's BlockPool (free queue + ref counts).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace microllm::infer {

class BlockAllocator {
 public:
  // Throws microllm::Error (op "block allocator") unless num_blocks ≥ 1.
  explicit BlockAllocator(int32_t num_blocks);

  // A free block with reference count 1, or nullopt when none is free (never throws).
  std::optional<int32_t> allocate();
  // True when n blocks can be allocated now (n ≤ num_free()).
  bool can_allocate(int64_t n) const { return n <= num_free(); }

  // Another holder of an allocated block. Throws on a bad id or a free block.
  void incref(int32_t block);
  // One holder fewer; the block returns to the free list at 0. Throws on a bad id or a free
  // block (a double free).
  void decref(int32_t block);

  int32_t num_blocks() const { return static_cast<int32_t>(ref_counts_.size()); }  // NB
  int32_t num_free() const { return static_cast<int32_t>(free_.size()); }
  int32_t num_used() const { return num_blocks() - num_free(); }
  int32_t ref_count(int32_t block) const;  // 0 for a free block; throws on a bad id

 private:
  void check_id(int32_t block, const char* what) const;

  std::vector<int32_t> ref_counts_;  // (NB) holders of each block
  std::vector<int32_t> free_;        // free block ids; the back is handed out next
};

}  // namespace microllm::infer
