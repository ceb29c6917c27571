// Bucket assignment and ZeRO-1 shard segments (see buckets.h).
#include "microllm/train/distributed/buckets.h"

#include <algorithm>

#include "microllm/core/error.h"

namespace microllm::train {

std::vector<GradBucket> assign_buckets(const std::vector<ParamLayout>& params, int64_t cap_bytes,
                                       int world_size) {
  MICROLLM_CHECK(cap_bytes > 0, "buckets", "bucket capacity must be positive, found ", cap_bytes,
                 " bytes");
  MICROLLM_CHECK(world_size >= 1, "buckets", "world size must be ≥ 1, found ", world_size);
  std::vector<GradBucket> buckets;
  int64_t bytes = 0;  // of the open bucket
  for (size_t i = params.size(); i-- > 0;) {
    const ParamLayout& p = params[i];
    MICROLLM_CHECK(p.numel > 0, "buckets", "parameter ", i, " has no elements");
    const int64_t p_bytes = p.numel * static_cast<int64_t>(dtype_size(p.dtype));
    const bool open = !buckets.empty() && !buckets.back().entries.empty();
    if (!open || buckets.back().dtype != p.dtype || bytes + p_bytes > cap_bytes) {
      buckets.push_back(GradBucket{});
      buckets.back().dtype = p.dtype;
      bytes = 0;
    }
    GradBucket& b = buckets.back();
    b.entries.push_back({i, b.numel, p.numel});
    b.numel += p.numel;
    bytes += p_bytes;
  }
  for (GradBucket& b : buckets)
    b.padded_numel = (b.numel + world_size - 1) / world_size * world_size;
  return buckets;
}

std::vector<ShardSegment> shard_segments(const GradBucket& bucket, int rank, int world_size) {
  MICROLLM_CHECK(rank >= 0 && rank < world_size, "buckets", "rank ", rank,
                 " is outside the world of ", world_size);
  const int64_t shard = bucket.shard_numel(world_size);
  const int64_t lo = rank * shard, hi = lo + shard;  // the rank's elements of the bucket
  std::vector<ShardSegment> out;
  for (const BucketEntry& e : bucket.entries) {
    const int64_t begin = std::max(lo, e.offset), end = std::min(hi, e.offset + e.numel);
    if (begin < end) out.push_back({e.param, begin - e.offset, begin - lo, end - begin});
  }
  return out;
}

}  // namespace microllm::train
