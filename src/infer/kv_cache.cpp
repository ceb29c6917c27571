// KvCache (see kv_cache.h).
#include "microllm/infer/kv_cache.h"

namespace microllm::infer {

int64_t KvCache::bytes_per_block(const model::ModelConfig& c, DType dtype, int64_t block_size) {
  return 2 * c.num_layers * block_size * c.kv_dim() * static_cast<int64_t>(dtype_size(dtype));
}

int64_t KvCache::blocks_for_bytes(const model::ModelConfig& c, DType dtype, int64_t block_size,
                                  int64_t bytes) {
  return bytes / bytes_per_block(c, dtype, block_size);
}

KvCache::KvCache(const model::ModelConfig& c, Device device, DType dtype, int64_t block_size,
                 int64_t num_blocks)
    : num_blocks_(num_blocks), block_size_(block_size), dtype_(dtype) {
  MICROLLM_CHECK(dtype == DType::F32 || dtype == DType::BF16, "KvCache",
                 "the KV cache dtype must be f32 or bf16, found ", dtype);
  MICROLLM_CHECK(block_size > 0 && num_blocks > 0, "KvCache",
                 "block size and block count must be positive, found block size ", block_size,
                 " and ", num_blocks, " blocks");
  const Shape pool_shape = {num_blocks, block_size, c.num_kv_heads, c.head_dim};
  const int64_t pool_numel = shape_numel(pool_shape);
  pool_ = Tensor::empty({2 * c.num_layers * pool_numel}, dtype, device);  // (2·L·NB·BS·Hkv·D)
  // Zeroed once so a padding read of an unwritten slot can never see NaN bit patterns.
  pool_.fill(0.0);
  const Strides strides = contiguous_strides(pool_shape);
  for (int64_t l = 0; l < c.num_layers; ++l) {
    auto view = [&](int64_t which) {
      return Tensor::from_storage(pool_.storage(), pool_shape, strides,
                                  pool_.offset() + (2 * l + which) * pool_numel, dtype);
    };
    layers_.push_back({view(0), view(1)});  // (NB, BS, Hkv, D) each
  }
}

}  // namespace microllm::infer
