// Lab: what launching a decode step's CUDA graph costs the host and the device. Not a kernel
// lab: a chain of N short kernels (the decode step is 126 of them at batch 1) captured into one
// graph, or into `parts` graphs launched back to back, as the engine replays a step: an upload
// of the step's inputs (a small host → device copy), the graph launch, and at the end of the
// graph a small device → host copy of the outputs; then the host waits for it.
//
// Per (nodes, programmatic edges, parts) it prints the medians of:
//   launch   host µs spent in the upload and graph-launch calls (the engine's launch_seconds)
//   serial   µs from the upload to the end of the wait, one step at a time (the engine's step)
//   queued   µs a step when the host enqueues 20 steps before it waits (the device's own time
//            a step, with no host on the critical path); per node: queued / nodes, the device's
//            cost of one kernel boundary of the chain (the kernels themselves do next to nothing)
// serial − queued is what a step loses to the host and to the device's start-up latencies:
// what launching step n + 1 before reading step n's outputs (or fewer, shorter graphs) could
// win. Questions: does the launch cost grow with the nodes; do programmatic edges (the
// engine's dependent launches) make it dearer; does splitting the graph let the device start
// before the whole launch is done?
//
// The kernels: `blocks` blocks of 256 threads (default 132), one store each; with programmatic
// edges each waits for its predecessor with griddepcontrol.wait and then lets the next grid
// start, as the library's decode kernels do (src/cuda/dependent_launch.cuh). The check: the
// stored counter equals the number of kernels run.
//
//   ./dev/cuda/build/graph_launch [blocks]   (default 132)
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "common.h"

namespace {

using Clock = std::chrono::steady_clock;

// One link of the chain: block 0's thread 0 adds 1 to the counter after the previous link.
__global__ void link_kernel(int* counter, int* sink) {
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  if (blockIdx.x == 0 && threadIdx.x == 0) *counter += 1;
  if (threadIdx.x == 0) sink[blockIdx.x] = blockIdx.x;  // every block stores something
}

void launch_link(cudaStream_t stream, bool programmatic, int blocks, int* counter, int* sink) {
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = programmatic ? 1 : 0;
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(static_cast<unsigned>(blocks));
  config.blockDim = dim3(256);
  config.stream = stream;
  config.attrs = &attribute;
  config.numAttrs = 1;
  CUDA_CHECK(cudaLaunchKernelEx(&config, link_kernel, counter, sink));
}

struct Step {
  std::vector<cudaGraphExec_t> parts;  // launched in order
};

// The chain of `nodes` links captured as `parts` graphs; the last ends with the outputs' copy.
Step capture_step(cudaStream_t stream, int nodes, int parts, bool programmatic, int blocks,
                  int* counter, int* sink, const int* outputs, int* host_outputs) {
  Step step;
  for (int p = 0; p < parts; ++p) {
    const int first = nodes * p / parts, last = nodes * (p + 1) / parts;
    cudaGraph_t graph = nullptr;
    CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    for (int i = first; i < last; ++i) launch_link(stream, programmatic, blocks, counter, sink);
    if (p == parts - 1)
      CUDA_CHECK(
          cudaMemcpyAsync(host_outputs, outputs, 64 * sizeof(int), cudaMemcpyDeviceToHost, stream));
    CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
    cudaGraphExec_t exec = nullptr;
    CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    CUDA_CHECK(cudaGraphUpload(exec, stream));
    CUDA_CHECK(cudaGraphDestroy(graph));
    step.parts.push_back(exec);
  }
  return step;
}

double us_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::micro>(b - a).count();
}

}  // namespace

int main(int argc, char** argv) {
  lab::require_device("graph_launch");
  lab::require_kernel_image("graph_launch", link_kernel);
  const int blocks = argc > 1 ? std::atoi(argv[1]) : 132;
  if (blocks < 1 || blocks > 65535) {
    std::fprintf(stderr, "graph_launch: blocks must be in [1, 65535], got %s\n", argv[1]);
    return 1;
  }
  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  int *counter = nullptr, *sink = nullptr, *inputs = nullptr;
  CUDA_CHECK(cudaMalloc(&counter, sizeof(int)));
  CUDA_CHECK(cudaMalloc(&sink, 65536 * sizeof(int)));
  CUDA_CHECK(cudaMalloc(&inputs, 64 * sizeof(int)));
  int *host_inputs = nullptr, *host_outputs = nullptr;
  CUDA_CHECK(cudaMallocHost(&host_inputs, 64 * sizeof(int)));
  CUDA_CHECK(cudaMallocHost(&host_outputs, 64 * sizeof(int)));
  for (int i = 0; i < 64; ++i) host_inputs[i] = i;
  cudaEvent_t done;
  CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));

  const int kReps = 200, kQueued = 20;
  bool all_ok = true;
  std::printf("%6s %5s %6s %12s %12s %12s %14s %10s  check\n", "nodes", "prog", "parts",
              "launch us", "serial us", "queued us", "serial-queued", "per node");
  for (int nodes : {32, 64, 126, 256})
    for (bool programmatic : {false, true})
      for (int parts : {1, 2, 4}) {
        CUDA_CHECK(cudaMemset(counter, 0, sizeof(int)));
        Step step = capture_step(stream, nodes, parts, programmatic, blocks, counter, sink, inputs,
                                 host_outputs);
        auto enqueue = [&] {  // the engine's upload and replay
          CUDA_CHECK(cudaMemcpyAsync(inputs, host_inputs, 64 * sizeof(int), cudaMemcpyHostToDevice,
                                     stream));
          for (cudaGraphExec_t exec : step.parts) CUDA_CHECK(cudaGraphLaunch(exec, stream));
        };
        std::vector<double> launch_us, serial_us, queued_us;
        int64_t runs = 0;
        for (int r = 0; r < 10; ++r, ++runs) enqueue();  // warm-up
        CUDA_CHECK(cudaStreamSynchronize(stream));
        for (int r = 0; r < kReps; ++r, ++runs) {
          const Clock::time_point t0 = Clock::now();
          enqueue();
          const Clock::time_point t1 = Clock::now();
          CUDA_CHECK(cudaEventRecord(done, stream));
          CUDA_CHECK(cudaEventSynchronize(done));
          const Clock::time_point t2 = Clock::now();
          launch_us.push_back(us_between(t0, t1));
          serial_us.push_back(us_between(t0, t2));
        }
        for (int r = 0; r < kReps / kQueued; ++r) {
          const Clock::time_point t0 = Clock::now();
          for (int q = 0; q < kQueued; ++q, ++runs) enqueue();
          CUDA_CHECK(cudaEventRecord(done, stream));
          CUDA_CHECK(cudaEventSynchronize(done));
          queued_us.push_back(us_between(t0, Clock::now()) / kQueued);
        }
        int counted = 0;
        CUDA_CHECK(cudaMemcpy(&counted, counter, sizeof(int), cudaMemcpyDeviceToHost));
        const bool ok = counted == runs * nodes;
        all_ok = all_ok && ok;
        const double serial = lab::median(serial_us), queued = lab::median(queued_us);
        std::printf("%6d %5d %6d %12.2f %12.2f %12.2f %14.2f %10.3f  %s\n", nodes,
                    programmatic ? 1 : 0, parts, lab::median(launch_us), serial, queued,
                    serial - queued, queued / nodes, ok ? "ok" : "FAIL");
        for (cudaGraphExec_t exec : step.parts) CUDA_CHECK(cudaGraphExecDestroy(exec));
      }
  std::printf(
      "blocks a kernel: %d; launch: host time of the upload and graph-launch calls; serial: "
      "upload to the end of the wait, one step at a time; queued: a step's share of %d "
      "steps enqueued before one wait\n",
      blocks, kQueued);
  CUDA_CHECK(cudaEventDestroy(done));
  CUDA_CHECK(cudaFreeHost(host_inputs));
  CUDA_CHECK(cudaFreeHost(host_outputs));
  CUDA_CHECK(cudaFree(inputs));
  CUDA_CHECK(cudaFree(sink));
  CUDA_CHECK(cudaFree(counter));
  CUDA_CHECK(cudaStreamDestroy(stream));
  return all_ok ? 0 : 1;
}
