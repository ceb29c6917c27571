// The caching allocator for device memory, and the private pools CUDA graphs allocate from.
//
// Freed blocks are kept in pools keyed by (device, stream) and handed out again to
// requests on the same stream, which stream order makes safe without synchronization.
// A block used on another stream (record_stream) is reused only after events recorded on
// those streams complete. Sizes are rounded to classes (512 B below 1 MiB, 64 KiB below
// 64 MiB, 2 MiB above) and a cached block serves requests from half its size up. When
// cudaMalloc fails, the cache is released and the allocation tried once more.
//
// CUDA-graph capture (DESIGN §2). A captured graph replays the addresses it saw, so its
// memory must stay its own until the graph is destroyed. While a stream captures:
//   - an allocation on it is an Error unless a PrivatePool is routed to that stream by a
//     PoolGuard; the pool then serves it (cudaMalloc is called in relaxed capture mode: the
//     allocation itself is not part of the graph, and the pool keeps it for the graph);
//   - a block of a pool, freed, goes back to that pool only, and is reused only by later
//     requests under the same pool — never by the general cache or another stream;
//   - a general-cache block freed while a capture is in progress on its device may be read
//     by the graph at replay: the pool routed to the capturing stream (its own stream's
//     first) adopts it, released with the pool; with no such pool (or several captures) it
//     is held back for good (capture_held_bytes), never handed out again.
// Destroying a PrivatePool returns its free blocks to the driver; blocks still in live
// tensors are returned when those tensors go.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "microllm/core/device.h"
#include "microllm/cuda/runtime.h"

namespace microllm::cuda {

struct AllocatorStats {
  int64_t allocated_bytes = 0;       // in live tensors (rounded sizes)
  int64_t peak_allocated_bytes = 0;  // since start or reset_peak_stats
  int64_t reserved_bytes = 0;        // obtained from cudaMalloc and not yet returned
  int64_t peak_reserved_bytes = 0;
  int64_t allocations = 0;      // requests served (private pools' included)
  int64_t cache_hits = 0;       // requests served from a cache (private pools' included)
  int64_t backend_mallocs = 0;  // cudaMalloc calls
  int64_t backend_frees = 0;    // cudaFree calls
  // Private pools; their requests and bytes are counted in the totals above as well.
  int64_t pool_allocations = 0;     // requests served by a private pool
  int64_t pool_cache_hits = 0;      // of those, served from the pool's free blocks
  int64_t pool_reserved_bytes = 0;  // held by private pools (free or in live tensors)
  int64_t private_pools = 0;        // pools alive now
  int64_t capture_held_bytes = 0;   // freed during a capture without a pool: never reused
};

// Memory of one pool (one CUDA graph).
struct PoolStats {
  int64_t allocations = 0;      // requests served
  int64_t cache_hits = 0;       // of those, from the pool's free blocks
  int64_t backend_mallocs = 0;  // cudaMalloc calls made for the pool
  int64_t allocated_bytes = 0;  // in live tensors
  int64_t reserved_bytes = 0;   // owned by the pool
  int64_t adopted_blocks = 0;   // general-cache blocks freed during capture, kept by the pool
};

void* allocate(size_t nbytes, Device device);
void deallocate(void* ptr);
// Marks the block holding `ptr` as used by `stream` too (beyond its allocation stream).
// Not supported for private-pool blocks (captured work stays on the capture stream).
void record_stream(void* ptr, cudaStream_t stream);
// Returns every cached, unused block of the general cache of `device` to the driver
// (private pools keep theirs). An Error while the current stream captures.
void empty_cache(Device device);
AllocatorStats allocator_stats(Device device);
void reset_peak_stats(Device device);
// The size class a request of `nbytes` is rounded to.
size_t round_size(size_t nbytes);

// Memory reserved for one CUDA graph; allocations reach it only through a PoolGuard.
// Activate a graph's pool only while capturing that graph: blocks it hands out afterwards
// may be memory the graph's replays write.
class PrivatePool {
 public:
  explicit PrivatePool(Device device);
  ~PrivatePool();  // free blocks → cudaFree; blocks in live tensors follow when freed
  PrivatePool(const PrivatePool&) = delete;
  PrivatePool& operator=(const PrivatePool&) = delete;

  Device device() const { return device_; }
  uint64_t id() const { return id_; }
  PoolStats stats() const;

 private:
  Device device_;
  uint64_t id_;
};

// For its scope, allocations on `stream` (of the pool's device) come from `pool` and the
// pool adopts general-cache blocks freed while the stream captures. Guards nest per stream.
class PoolGuard {
 public:
  PoolGuard(PrivatePool& pool, const Stream& stream);
  ~PoolGuard();
  PoolGuard(const PoolGuard&) = delete;
  PoolGuard& operator=(const PoolGuard&) = delete;

 private:
  int device_;
  cudaStream_t stream_;
  uint64_t previous_;  // pool routed to the stream before this guard (0: none)
};

}  // namespace microllm::cuda
