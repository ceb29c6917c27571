// One block's pass over a row of logits with 16-byte loads, shared by the sampling and
// log-probability kernels. A row of the 151,936-entry vocabulary is 300 KB of BF16 that the
// LM head has just written (it sits in L2); one block streams it, so the time goes to how
// many loads a thread has in flight: element-wise 2-byte loads in a dependent loop took
// ~22 µs a row on the H200, kRowLoads 16-byte loads in flight per thread a few µs.
//
// for_each_logit(row, vocab, fn) calls fn(value as float, id) once per element, each element
// by one thread of the block, in no fixed order across threads: callers reduce with an
// order-free rule (the (value, lower id) ranking) or accept F32 rounding in their sums.
// Rows need not be 16-byte aligned (odd vocabularies): the elements before the first
// aligned address and after the last whole vector are visited one by one.
#pragma once

#include <cstdint>

#include "../cuda_common.cuh"

namespace microllm::ops::cuda_detail {

inline constexpr int kRowLoads = 4;  // 16-byte loads per thread issued before the first use

template <class T, class Fn>
__device__ __forceinline__ void for_each_logit(const T* row, int64_t vocab, Fn&& fn) {
  constexpr int kV = kVec<T>;
  const int64_t threads = blockDim.x;
  // Elements before the first 16-byte boundary (rows of odd vocabularies start anywhere).
  const auto address = reinterpret_cast<uintptr_t>(row);
  const int64_t head = min(vocab, static_cast<int64_t>(((16 - address % 16) % 16) / sizeof(T)));
  for (int64_t i = threadIdx.x; i < head; i += threads) fn(to_float(row[i]), i);
  const int64_t groups = (vocab - head) / kV;                               // whole 16-byte vectors
  const Vec16<T>* vectors = reinterpret_cast<const Vec16<T>*>(row + head);  // (groups)
  for (int64_t g0 = threadIdx.x; g0 < groups; g0 += kRowLoads * threads) {
    Vec16<T> v[kRowLoads];
#pragma unroll
    for (int u = 0; u < kRowLoads; ++u) {
      const int64_t g = g0 + u * threads;
      if (g < groups) v[u] = vectors[g];
    }
#pragma unroll
    for (int u = 0; u < kRowLoads; ++u) {
      const int64_t g = g0 + u * threads;
      if (g >= groups) break;
#pragma unroll
      for (int e = 0; e < kV; ++e) fn(to_float(v[u].v[e]), head + g * kV + e);
    }
  }
  for (int64_t i = head + groups * kV + threadIdx.x; i < vocab; i += threads)
    fn(to_float(row[i]), i);
}

}  // namespace microllm::ops::cuda_detail
