// Visits every element of a shape in row-major order and hands the caller the element
// offsets of N strided tensors at that index — the loop under copies, casts and
// broadcasting elementwise operators on the CPU. Work is split across OpenMP threads in
// contiguous chunks of the linear index; each chunk unravels its first index once and then
// advances like an odometer.
#pragma once

#include <array>
#include <cstdint>

#include "microllm/core/error.h"
#include "microllm/core/shape.h"

namespace microllm {

constexpr int64_t kMaxStridedRank = 16;

// fn(int64_t linear_index, const std::array<int64_t, N>& offsets). strides[t] points at the
// shape.size() strides of tensor t (Tensor::strides().data()): passing pointers copies no
// vector, so the loop makes no heap allocation.
template <size_t N, class Fn>
void strided_loop(const Shape& shape, const std::array<const int64_t*, N>& strides, Fn fn) {
  const int64_t rank = static_cast<int64_t>(shape.size());
  MICROLLM_CHECK(rank <= kMaxStridedRank, "strided_loop", "rank ", rank, " is above the supported ",
                 kMaxStridedRank, " for shape ", shape_str(shape));
  const int64_t total = shape_numel(shape);
  if (total == 0) return;
  constexpr int64_t kChunk = 1 << 14;
  const int64_t chunks = (total + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (chunks > 1)
  for (int64_t chunk = 0; chunk < chunks; ++chunk) {
    const int64_t begin = chunk * kChunk;
    const int64_t end = begin + kChunk < total ? begin + kChunk : total;
    // Unravel `begin` into a multi-index and the starting offsets.
    int64_t index[kMaxStridedRank] = {};
    std::array<int64_t, N> offsets{};
    int64_t rest = begin;
    for (int64_t d = rank - 1; d >= 0; --d) {
      index[d] = rest % shape[d];
      rest /= shape[d];
      for (size_t t = 0; t < N; ++t) offsets[t] += index[d] * strides[t][d];
    }
    for (int64_t linear = begin; linear < end; ++linear) {
      fn(linear, offsets);
      // Odometer step: bump the last dimension, carry into earlier ones.
      for (int64_t d = rank - 1; d >= 0; --d) {
        ++index[d];
        for (size_t t = 0; t < N; ++t) offsets[t] += strides[t][d];
        if (index[d] < shape[d]) break;
        for (size_t t = 0; t < N; ++t) offsets[t] -= index[d] * strides[t][d];
        index[d] = 0;
      }
    }
  }
}

// The same loop over stride vectors (each of shape.size() entries).
template <size_t N, class Fn>
void strided_loop(const Shape& shape, const std::array<Strides, N>& strides, Fn fn) {
  std::array<const int64_t*, N> pointers{};
  for (size_t t = 0; t < N; ++t) pointers[t] = strides[t].data();
  strided_loop<N>(shape, pointers, fn);
}

}  // namespace microllm
