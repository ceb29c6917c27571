// How a strided copy walks memory (host code, no CUDA): the copy's dimensions merged where
// both tensors are contiguous across them, then, where the innermost dimension is contiguous
// in both and everything lines up, elements grouped into wider words (up to 16 bytes).
//
// A transpose like (B, T, H, D) → (B, H, T, D) keeps rows of D elements contiguous on both
// sides; copied element by element with a rank-4 index computation per 2-byte element it
// moved 0.3 TB/s (read + write) on the H200; copied as 16-byte words it is a streaming copy.
#pragma once

#include <cstdint>
#include <vector>

namespace microllm::cuda {

struct CopyPlan {
  int rank = 0;                      // dims after merging; 0 for an empty copy
  int word_bytes = 1;                // bytes moved per index: element size × elements per word
  std::vector<int64_t> sizes;        // (rank), in words for the innermost dim
  std::vector<int64_t> dst_strides;  // (rank), in words
  std::vector<int64_t> src_strides;  // (rank), in words
  int64_t words = 0;                 // product of sizes
};

// sizes/strides in elements of `element_bytes` bytes; dst_address, src_address the byte
// addresses of element 0. `max_word_bytes` caps the grouping (1 element: no grouping).
inline CopyPlan plan_copy(const std::vector<int64_t>& sizes,
                          const std::vector<int64_t>& dst_strides,
                          const std::vector<int64_t>& src_strides, int element_bytes,
                          uint64_t dst_address, uint64_t src_address, int max_word_bytes = 16) {
  CopyPlan plan;
  plan.word_bytes = element_bytes;
  plan.words = 1;
  for (int64_t s : sizes) plan.words *= s;
  if (plan.words == 0) return plan;
  // Dims of size 1 do not move the index; the rest, outermost first.
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (sizes[d] == 1) continue;
    plan.sizes.push_back(sizes[d]);
    plan.dst_strides.push_back(dst_strides[d]);
    plan.src_strides.push_back(src_strides[d]);
  }
  if (plan.sizes.empty()) {  // one element
    plan.sizes = {1};
    plan.dst_strides = {1};
    plan.src_strides = {1};
  }
  // Merge dim d into d + 1 when stepping d is the same as stepping d + 1 size times, on both
  // sides.
  std::vector<int64_t> sz, ds, ss;
  for (size_t d = 0; d < plan.sizes.size(); ++d) {
    if (!sz.empty() && ds.back() == plan.sizes[d] * plan.dst_strides[d] &&
        ss.back() == plan.sizes[d] * plan.src_strides[d]) {
      sz.back() *= plan.sizes[d];
      ds.back() = plan.dst_strides[d];
      ss.back() = plan.src_strides[d];
      continue;
    }
    sz.push_back(plan.sizes[d]);
    ds.push_back(plan.dst_strides[d]);
    ss.push_back(plan.src_strides[d]);
  }
  plan.sizes = sz;
  plan.dst_strides = ds;
  plan.src_strides = ss;
  plan.rank = static_cast<int>(sz.size());
  // Group k elements of the innermost dim into one word when it is contiguous on both sides
  // and every other stride, both start addresses and the innermost size line up with k.
  const int last = plan.rank - 1;
  if (plan.dst_strides[last] != 1 || plan.src_strides[last] != 1) return plan;
  for (int bytes = max_word_bytes; bytes > element_bytes; bytes /= 2) {
    const int64_t k = bytes / element_bytes;
    if (bytes % element_bytes != 0 || plan.sizes[last] % k != 0 || dst_address % bytes != 0 ||
        src_address % bytes != 0)
      continue;
    bool aligned = true;
    for (int d = 0; d < last; ++d)
      aligned = aligned && plan.dst_strides[d] % k == 0 && plan.src_strides[d] % k == 0;
    if (!aligned) continue;
    plan.sizes[last] /= k;
    for (int d = 0; d < last; ++d) {
      plan.dst_strides[d] /= k;
      plan.src_strides[d] /= k;
    }
    plan.words /= k;
    plan.word_bytes = bytes;
    break;
  }
  return plan;
}

}  // namespace microllm::cuda
