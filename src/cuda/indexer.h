// StridedIndexer from a tensor's shape and strides (host code for kernel launchers).
#pragma once

#include "kernel_utils.cuh"
#include "microllm/core/error.h"
#include "microllm/core/tensor.h"

namespace microllm::cuda {

// `op` names the caller in the error for tensors of rank above kMaxRank.
inline StridedIndexer make_indexer(const Tensor& t, const char* op) {
  MICROLLM_CHECK(t.dim() <= kMaxRank, op, "rank ", t.dim(), " is above the supported ", kMaxRank,
                 " for ", t.describe());
  StridedIndexer ix;
  ix.rank = static_cast<int>(t.dim());
  for (int d = 0; d < ix.rank; ++d) {
    ix.sizes[d] = t.shape()[d];
    ix.strides[d] = t.strides()[d];
  }
  return ix;
}

}  // namespace microllm::cuda
