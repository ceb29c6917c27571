// Shared by the CUDA kernels of the operators (.cu files under src/ops/): dtype dispatch to
// the element types kernels are instantiated for, launch checks, indexers from tensors.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "../cuda/dependent_launch.cuh"
#include "../cuda/float_dispatch.h"
#include "../cuda/indexer.h"
#include "../cuda/kernel_utils.cuh"
#include "microllm/core/tensor.h"
#include "microllm/cuda/check.h"
#include "microllm/cuda/runtime.h"

namespace microllm::ops::cuda_detail {

using microllm::cuda::allow_dynamic_shared;
using microllm::cuda::block_max;
using microllm::cuda::block_sum;
using microllm::cuda::ceil_div;
using microllm::cuda::commit_async;
using microllm::cuda::copy16_async;
using microllm::cuda::enter_dependent_grid;
using microllm::cuda::from_float;
using microllm::cuda::grid_for;
using microllm::cuda::kVec;
using microllm::cuda::kWarp;
using microllm::cuda::last_to_arrive;
using microllm::cuda::launch_dependent;
using microllm::cuda::launch_dependent_clusters;
using microllm::cuda::make_indexer;
using microllm::cuda::StridedIndexer;
using microllm::cuda::to_float;
using microllm::cuda::Vec16;
using microllm::cuda::wait_async;
using microllm::cuda::warp_max;
using microllm::cuda::warp_sum;

using microllm::cuda::dispatch_cuda_float;
using microllm::cuda::dispatch_cuda_index;

inline cudaStream_t stream_of(const Tensor& t) {
  return microllm::cuda::current_stream_handle(t.device());
}

// True when every pointer is 16-byte aligned, so kernels may use 16-byte vector accesses.
inline bool aligned16(std::initializer_list<const void*> pointers) {
  for (const void* p : pointers)
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;
  return true;
}

template <class T>
T* ptr(const Tensor& t) {
  return static_cast<T*>(t.raw_data());
}

}  // namespace microllm::ops::cuda_detail
