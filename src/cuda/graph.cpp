// CudaGraph: stream capture into a private pool, instantiation and replay (see graph.h).
#include "microllm/cuda/graph.h"

#include "microllm/cuda/check.h"
#include "microllm/cuda/gemm.h"

namespace microllm::cuda {

CudaGraph::CudaGraph(Device device) : device_(device), pool_(device) {}

// The body runs before the members are destroyed: the executable graph goes first, then
// pool_ (declared before graph_) returns the memory the graph used.
CudaGraph::~CudaGraph() { destroy_graph(); }

void CudaGraph::destroy_graph() {
  if (exec_) cudaGraphExecDestroy(exec_);
  if (graph_) cudaGraphDestroy(graph_);
  exec_ = nullptr;
  graph_ = nullptr;
}

void CudaGraph::capture(const Stream& stream, const std::function<void()>& fn) {
  MICROLLM_CHECK(stream.device() == device_, "cuda graph", "capture on a stream of ",
                 stream.device(), " for a graph of ", device_);
  MICROLLM_CHECK(stream.handle() != nullptr, "cuda graph",
                 "the legacy default stream cannot be captured; use a created stream");
  set_device(device_);
  MICROLLM_CHECK(!is_capturing(stream), "cuda graph", "the stream of ", device_,
                 " is already capturing a graph");
  destroy_graph();
  // Made outside the pool: the workspace outlives this graph.
  reserve_gemm_workspace(stream);
  StreamGuard stream_guard(stream);
  PoolGuard pool_guard(pool_, stream);
  CUDA_CHECK(cudaStreamBeginCapture(stream.handle(), cudaStreamCaptureModeThreadLocal));
  cudaGraph_t graph = nullptr;
  try {
    fn();
  } catch (...) {
    // End the capture (it may have been invalidated) and drop what it recorded, so the
    // stream leaves capture mode and takes ordinary work again.
    cudaStreamEndCapture(stream.handle(), &graph);
    if (graph) cudaGraphDestroy(graph);
    cudaGetLastError();
    throw;
  }
  const cudaError_t ended = cudaStreamEndCapture(stream.handle(), &graph);
  if (ended != cudaSuccess) {
    if (graph) cudaGraphDestroy(graph);
    cudaGetLastError();
    MICROLLM_FAIL("cuda graph", "capture on ", device_, " failed: ", cudaGetErrorName(ended), " (",
                  cudaGetErrorString(ended),
                  "); the captured function made a call that cannot be captured (a host "
                  "synchronization, legacy-stream work, or work left on a forked stream)");
  }
  graph_ = graph;
  const cudaError_t instantiated = cudaGraphInstantiate(&exec_, graph_, 0);
  if (instantiated != cudaSuccess) {
    exec_ = nullptr;
    cudaGetLastError();
    destroy_graph();
    MICROLLM_FAIL("cuda graph", "instantiating the captured graph on ", device_,
                  " failed: ", cudaGetErrorName(instantiated), " (",
                  cudaGetErrorString(instantiated), ")");
  }
}

void CudaGraph::replay(const Stream& stream) const {
  MICROLLM_CHECK(exec_ != nullptr, "cuda graph", "replay of a graph that holds no capture");
  MICROLLM_CHECK(stream.device() == device_, "cuda graph", "replay on a stream of ",
                 stream.device(), " of a graph of ", device_);
  CUDA_CHECK(cudaGraphLaunch(exec_, stream.handle()));
}

int64_t CudaGraph::num_nodes() const {
  if (!graph_) return 0;
  size_t count = 0;
  CUDA_CHECK(cudaGraphGetNodes(graph_, nullptr, &count));
  return static_cast<int64_t>(count);
}

}  // namespace microllm::cuda
