// Programmatic dependent launch (compute capability 9.0, CUDA graphs included): a kernel
// launched through launch_dependent may be scheduled while the kernel before it in the
// stream is still running, so its launch, its block setup and whatever it can do without
// that kernel's results (the decode GEMV's first weight loads) overlap the predecessor's
// tail. The decode step is a chain of short kernels, so these gaps are much of its time.
//
// The contract, kept by every kernel launched this way:
//   - enter_dependent_grid() comes before anything that reads memory an earlier kernel of
//     the stream wrote and before any store; it waits until the previous grid has completed
//     and its stores are visible, then lets the next grid be scheduled;
//   - code before it reads only memory that the previous kernel does not write: weights,
//     which no kernel writes while a step runs, and what was written before the previous
//     kernel started: (paged attention with PagedHistory::earlier_steps) the step's metadata
//     and the KV-cache entries of earlier steps; (the decode GEMV with
//     GemvFusion::early_inputs) the residual and the step's positions and slots, read
//     through the L2, where the stores of completed grids are.
// Since each grid lets its successor start only after its own wait returned, at most two
// grids of a chain are resident at once, and the grid two back has always completed.
// A kernel without the attribute (programmatic_launch() off, or a plain <<<>>> launch)
// waits for its predecessor as usual; the device instructions are then no-ops.
#pragma once

#include <cuda_runtime.h>

#include <map>
#include <mutex>
#include <utility>

#include "microllm/cuda/check.h"
#include "microllm/cuda/runtime.h"

namespace microllm::cuda {

// Device: every thread of the block calls it once, at the same point.
__device__ __forceinline__ void enter_dependent_grid() {
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}

// Host: kernel<<<grid, block, shared_bytes, stream>>>(args...), with the programmatic
// stream serialization attribute when programmatic_launch() is on, and with
// `cluster_blocks` > 1 as thread-block clusters of that many consecutive blocks along x
// (grid.x a multiple of it). `name` is for errors.
template <class... Params, class... Args>
void launch_dependent_clusters(const char* name, void (*kernel)(Params...), dim3 grid, dim3 block,
                               unsigned cluster_blocks, size_t shared_bytes, cudaStream_t stream,
                               Args&&... args) {
  cudaLaunchAttribute attributes[2]{};
  attributes[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attributes[0].val.programmaticStreamSerializationAllowed = programmatic_launch() ? 1 : 0;
  attributes[1].id = cudaLaunchAttributeClusterDimension;
  attributes[1].val.clusterDim.x = cluster_blocks;
  attributes[1].val.clusterDim.y = 1;
  attributes[1].val.clusterDim.z = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = shared_bytes;
  config.stream = stream;
  config.attrs = attributes;
  config.numAttrs = cluster_blocks > 1 ? 2 : 1;
  const cudaError_t status = cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
  if (status != cudaSuccess) {
    (void)cudaGetLastError();  // clear it, so the next launch check does not report it again
    detail::throw_cuda_error(status, name, __FILE__, __LINE__);
  }
  detail::check_launch(name, __FILE__, __LINE__);
}

template <class... Params, class... Args>
void launch_dependent(const char* name, void (*kernel)(Params...), dim3 grid, dim3 block,
                      size_t shared_bytes, cudaStream_t stream, Args&&... args) {
  launch_dependent_clusters(name, kernel, grid, block, 1, shared_bytes, stream,
                            std::forward<Args>(args)...);
}

// Lets `kernel` take up to `bytes` of dynamic shared memory, per device (by default a block
// may have 48 KB less its static shared memory); the limit only ever rises.
inline void allow_dynamic_shared(const void* kernel, size_t bytes) {
  static std::mutex mutex;
  static std::map<std::pair<int, const void*>, size_t> allowed;
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  const std::lock_guard<std::mutex> lock(mutex);
  size_t& limit = allowed[{device, kernel}];
  if (bytes <= limit) return;
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  static_cast<int>(bytes)));
  limit = bytes;
}

}  // namespace microllm::cuda
