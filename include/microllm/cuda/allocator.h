// The caching allocator for device memory.
//
// Freed blocks are kept in pools keyed by (device, stream) and handed out again to
// requests on the same stream, which stream order makes safe without synchronization.
// A block used on another stream (record_stream) is reused only after events recorded on
// those streams complete. Sizes are rounded to classes (512 B below 1 MiB, 64 KiB below
// 64 MiB, 2 MiB above) and a cached block serves requests from half its size up. When
// cudaMalloc fails, the cache is released and the allocation tried once more.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "microllm/core/device.h"

namespace microllm::cuda {

struct AllocatorStats {
  int64_t allocated_bytes = 0;       // in live tensors (rounded sizes)
  int64_t peak_allocated_bytes = 0;  // since start or reset_peak_stats
  int64_t reserved_bytes = 0;        // obtained from cudaMalloc and not yet returned
  int64_t peak_reserved_bytes = 0;
  int64_t allocations = 0;      // requests served
  int64_t cache_hits = 0;       // requests served from the cache
  int64_t backend_mallocs = 0;  // cudaMalloc calls
  int64_t backend_frees = 0;    // cudaFree calls
};

void* allocate(size_t nbytes, Device device);
void deallocate(void* ptr);
// Marks the block holding `ptr` as used by `stream` too (beyond its allocation stream).
void record_stream(void* ptr, cudaStream_t stream);
// Returns every cached, unused block of `device` to the driver.
void empty_cache(Device device);
AllocatorStats allocator_stats(Device device);
void reset_peak_stats(Device device);
// The size class a request of `nbytes` is rounded to.
size_t round_size(size_t nbytes);

}  // namespace microllm::cuda
