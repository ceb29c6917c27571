// Gradient buckets for data-parallel training, and the ZeRO-1 shard of each bucket a rank
// owns. Pure layout functions: no tensors, no communication (tested on their own).
//
// Buckets (as PyTorch DDP's Reducer): parameters are taken in *reverse registration order*
// — the Hugging Face order of model::parameter_specs, embeddings first, so reversed the LM
// head and the last layers come first — because backward produces their gradients first.
// A bucket closes when the next parameter would push it past `cap_bytes` or has another
// dtype; a parameter larger than the cap gets a bucket of its own. Inside a bucket the
// parameters are flattened one after another in that same order:
//
//   bucket buffer (padded_numel) = [ p_k.flat | p_k−1.flat | … | zero padding ]
//
// padded_numel rounds numel up to a multiple of the world size W so that a reduce-scatter
// can hand each rank an equal shard of S = padded_numel / W elements: rank r owns bucket
// elements [r·S, (r+1)·S). The padding stays zero and belongs to no parameter.
#pragma once

#include <cstdint>
#include <vector>

#include "microllm/core/dtype.h"

namespace microllm::train {

struct BucketEntry {
  size_t param;    // index into the registration-order parameter list
  int64_t offset;  // first element in the bucket buffer
  int64_t numel;
};

struct GradBucket {
  std::vector<BucketEntry> entries;  // reverse registration order
  DType dtype = DType::F32;
  int64_t numel = 0;         // Σ entries' numel
  int64_t padded_numel = 0;  // numel rounded up to a multiple of the world size
  int64_t shard_numel(int world_size) const { return padded_numel / world_size; }
};

struct ParamLayout {
  int64_t numel;
  DType dtype;
};

// Buckets for parameters given in registration order. cap_bytes > 0, world_size ≥ 1.
std::vector<GradBucket> assign_buckets(const std::vector<ParamLayout>& params, int64_t cap_bytes,
                                       int world_size);

// A run of one parameter's elements inside a rank's shard of a bucket.
struct ShardSegment {
  size_t param;          // index into the registration-order parameter list
  int64_t param_offset;  // first element within the flattened parameter
  int64_t shard_offset;  // first element within the rank's shard (0 ≤ … < S)
  int64_t numel;
};

// The segments of `bucket` that `rank` of `world_size` owns under ZeRO-1, in bucket order.
// Over all ranks they cover every element of every entry exactly once.
std::vector<ShardSegment> shard_segments(const GradBucket& bucket, int rank, int world_size);

}  // namespace microllm::train
