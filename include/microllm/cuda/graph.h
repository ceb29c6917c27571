// CudaGraph: capture a sequence of stream work once, replay it many times.
//
// Mechanism only (INFERENCE.md principle 6): it knows nothing of models or batch buckets.
// capture(stream, fn) runs fn with `stream` current and its allocations routed to the
// graph's own PrivatePool, records every launch and copy fn makes into a CUDA graph and
// instantiates it; replay(stream) launches the whole graph with one call. Tensors fn
// allocates come from the pool and keep their addresses: each replay rewrites them, so
// inputs are written into buffers that existed before capture and outputs read from
// buffers the caller keeps alive. The pool is released (and the graph destroyed) with the
// CudaGraph; replays still in flight finish first (cudaFree waits for the device).
//
// Capture mode: cudaStreamCaptureModeThreadLocal. Unsafe calls (a synchronization, a
// cudaMalloc outside the pool) made by the capturing thread fail loudly, which is what
// keeps a captured step honest, while other threads — an HTTP server, a loader, another
// engine's device — keep working; under the global mode any thread's cudaMalloc would
// break (or be broken by) the capture. The allocator and check_launch cooperate: pool
// mallocs switch to relaxed mode around the driver call, and launch checks never
// synchronize a capturing stream.
//
// Not captured: host work in fn runs once, at capture. Counters (transfer_stats,
// allocator_stats) see fn's copies and allocations once, at capture; a replay adds nothing.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>

#include "microllm/core/device.h"
#include "microllm/cuda/allocator.h"
#include "microllm/cuda/runtime.h"

namespace microllm::cuda {

class CudaGraph {
 public:
  explicit CudaGraph(Device device = Device::cuda(0));
  ~CudaGraph();  // destroys the executable graph, then releases the pool
  CudaGraph(const CudaGraph&) = delete;
  CudaGraph& operator=(const CudaGraph&) = delete;

  // Captures fn's work on `stream` (a stream of this graph's device other than the legacy
  // default stream) and instantiates it; a graph captured before is replaced (its pool is
  // kept and reused). If fn throws, the capture is ended and discarded, the stream is left
  // usable, and the exception propagates; the graph stays empty.
  void capture(const Stream& stream, const std::function<void()>& fn);
  // Launches the captured graph on `stream` (of this device); asynchronous, no allocation.
  void replay(const Stream& stream) const;

  bool captured() const { return exec_ != nullptr; }
  Device device() const { return device_; }
  int64_t num_nodes() const;  // kernels, copies and memsets in the graph (0 when empty)
  const PrivatePool& pool() const { return pool_; }

 private:
  void destroy_graph();

  Device device_;
  PrivatePool pool_;
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
};

}  // namespace microllm::cuda
