// One block's pass over a row of logits with 16-byte loads, shared by the sampling and
// log-probability kernels. A row of the 151,936-entry vocabulary is 300 KB of BF16 that the
// LM head has just written (it sits in L2); one block streams it, so the time goes to how
// many loads a thread has in flight: element-wise 2-byte loads in a dependent loop took
// ~22 µs a row on the H200, kRowLoads 16-byte loads in flight per thread a few µs.
//
// for_each_logit(row, vocab, fn) calls fn(value as float, id) once per element. Which thread
// visits an element, and in which order a thread visits its elements, depend on the ids
// alone — never on the row's address — so a row gives the same sums alone and at any place
// of a batch: thread t takes the groups of kVec<T> consecutive ids g = t, t + threads, ...,
// then tail element groups·kVec + t. A row that starts on a 16-byte boundary (every row of a
// vocabulary that is a multiple of 8) loads a group in one access, other rows element by
// element.
#pragma once

#include <cstdint>

#include "../cuda_common.cuh"

namespace microllm::ops::cuda_detail {

inline constexpr int kRowLoads = 4;  // groups per thread loaded before the first is used

template <class T, class Fn>
__device__ __forceinline__ void for_each_logit(const T* row, int64_t vocab, Fn&& fn) {
  constexpr int kV = kVec<T>;
  const int64_t threads = blockDim.x;
  const int64_t groups = vocab / kV;                                // whole groups of kV ids
  const bool aligned = reinterpret_cast<uintptr_t>(row) % 16 == 0;  // uniform over the block
  for (int64_t g0 = threadIdx.x; g0 < groups; g0 += kRowLoads * threads) {
    Vec16<T> v[kRowLoads];
#pragma unroll
    for (int u = 0; u < kRowLoads; ++u) {
      const int64_t g = g0 + u * threads;
      if (g >= groups) break;
      if (aligned) {
        v[u] = reinterpret_cast<const Vec16<T>*>(row)[g];
      } else {
#pragma unroll
        for (int e = 0; e < kV; ++e) v[u].v[e] = row[g * kV + e];
      }
    }
#pragma unroll
    for (int u = 0; u < kRowLoads; ++u) {
      const int64_t g = g0 + u * threads;
      if (g >= groups) break;
#pragma unroll
      for (int e = 0; e < kV; ++e) fn(to_float(v[u].v[e]), g * kV + e);
    }
  }
  const int64_t tail = groups * kV + threadIdx.x;  // fewer than kV ids are left
  if (tail < vocab) fn(to_float(row[tail]), tail);
}

}  // namespace microllm::ops::cuda_detail
