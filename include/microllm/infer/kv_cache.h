// KvCache: the paged K/V pools of every layer (DESIGN §7), carved from one allocation.
//
// Layer l holds K and V pools of shape (NB, BS, Hkv, D) in the cache dtype (F32 or BF16;
// attention accumulates in F32 either way). Which blocks a sequence owns is host
// bookkeeping (BlockAllocator, block tables); this class only owns the memory.
//
// Layout: one buffer of 2·L·NB·BS·Hkv·D elements, layer-major: [K₀, V₀, K₁, V₁, ...].
#pragma once

#include <cstdint>
#include <vector>

#include "microllm/model/config.h"
#include "microllm/model/step_batch.h"

namespace microllm::infer {

class KvCache {
 public:
  KvCache(const model::ModelConfig& config, Device device, DType dtype, int64_t block_size,
          int64_t num_blocks);

  // Bytes one block takes over all layers (K and V).
  static int64_t bytes_per_block(const model::ModelConfig& config, DType dtype, int64_t block_size);
  // The number of whole blocks that fit in `bytes`.
  static int64_t blocks_for_bytes(const model::ModelConfig& config, DType dtype, int64_t block_size,
                                  int64_t bytes);

  const std::vector<model::LayerKv>& layers() const { return layers_; }
  int64_t num_blocks() const { return num_blocks_; }
  int64_t block_size() const { return block_size_; }
  DType dtype() const { return dtype_; }
  int64_t bytes() const { return static_cast<int64_t>(pool_.nbytes()); }

 private:
  int64_t num_blocks_, block_size_;
  DType dtype_;
  Tensor pool_;  // (2·L·NB·BS·Hkv·D)
  std::vector<model::LayerKv> layers_;
};

}  // namespace microllm::infer
