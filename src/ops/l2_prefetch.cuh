// The device side of ops::L2Prefetch (microllm/ops/l2_prefetch.h): the byte ranges a kernel
// receives and the bulk prefetches (cp.async.bulk.prefetch.L2, compute capability 9.0) that
// its threads issue. A prefetch has no destination and no completion: the thread that
// issues it goes on at once, and the L2 fetches the bytes while the kernel runs.
#pragma once

#include <cstdint>

#include "microllm/ops/l2_prefetch.h"

namespace microllm::ops::cuda_detail {

// Up to two byte ranges, each 16-byte aligned and a multiple of 16 bytes (empty: bytes 0).
struct L2Ranges {
  const char* begin[2] = {nullptr, nullptr};
  int64_t bytes[2] = {0, 0};
};

// Bytes one prefetch instruction asks for.
inline constexpr int64_t kL2PrefetchChunk = 4096;

// The ranges of a checked L2Prefetch: each part shrunk to its whole 16-byte words (a hint
// may drop a few edge bytes).
inline L2Ranges l2_ranges(const L2Prefetch& prefetch) {
  L2Ranges r;
  for (int i = 0; i < 2; ++i) {
    const Tensor& part = prefetch.parts[static_cast<size_t>(i)];
    if (!part.defined()) continue;
    const auto first = reinterpret_cast<uintptr_t>(part.raw_data());
    const uintptr_t begin = (first + 15) / 16 * 16, end = (first + part.nbytes()) / 16 * 16;
    if (end <= begin) continue;
    r.begin[i] = reinterpret_cast<const char*>(begin);
    r.bytes[i] = static_cast<int64_t>(end - begin);
  }
  return r;
}

// Every thread of the grid calls it (at the kernel's start, before it waits for the previous
// kernel): the chunks of both ranges are dealt over the grid's threads.
__device__ __forceinline__ void prefetch_into_l2(const L2Ranges& r) {
  const int64_t threads = static_cast<int64_t>(gridDim.x) * gridDim.y * gridDim.z * blockDim.x;
  const int64_t block =
      (static_cast<int64_t>(blockIdx.z) * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x;
  const int64_t first = block * blockDim.x + threadIdx.x;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int64_t bytes = r.bytes[i];
    for (int64_t at = first * kL2PrefetchChunk; at < bytes; at += threads * kL2PrefetchChunk) {
      const auto size = static_cast<uint32_t>(bytes - at < kL2PrefetchChunk ? bytes - at
                                                                            : kL2PrefetchChunk);
      asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(r.begin[i] + at), "r"(size)
                   : "memory");
    }
  }
}

}  // namespace microllm::ops::cuda_detail
