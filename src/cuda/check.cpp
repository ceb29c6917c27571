// Error reporting for CUDA and cuBLAS status codes.
#include "microllm/cuda/check.h"

#include <atomic>
#include <cstdlib>
#include <cstring>

#include "microllm/cuda/runtime.h"

namespace microllm::cuda::detail {

void throw_cuda_error(cudaError_t status, const char* call, const char* file, int line) {
  MICROLLM_FAIL("cuda", cudaGetErrorName(status), " (", cudaGetErrorString(status), ") from ", call,
                " at ", file, ":", line);
}

void throw_cublas_error(cublasStatus_t status, const char* call, const char* file, int line) {
  MICROLLM_FAIL("cublas", cublasLtGetStatusName(status), " (", cublasLtGetStatusString(status),
                ") from ", call, " at ", file, ":", line);
}

namespace {
// -1: not decided yet (the build type, then MICROLLM_CUDA_SYNC_CHECK, decide at first use).
std::atomic<int> g_sync_check{-1};

bool sync_after_launch() {
  int value = g_sync_check.load(std::memory_order_relaxed);
  if (value < 0) {
#ifndef NDEBUG
    value = 1;
#else
    const char* env = std::getenv("MICROLLM_CUDA_SYNC_CHECK");
    value = env && std::strcmp(env, "0") != 0 ? 1 : 0;
#endif
    int expected = -1;
    g_sync_check.compare_exchange_strong(expected, value);
    value = g_sync_check.load();
  }
  return value == 1;
}
}  // namespace

void check_launch(const char* kernel, const char* file, int line) {
  cudaError_t status = cudaGetLastError();
  if (status == cudaSuccess && sync_after_launch()) {
    int device = 0;
    cudaGetDevice(&device);
    const Stream stream = current_stream(Device::cuda(device));
    // Synchronizing a capturing stream is illegal (it would invalidate the capture): inside
    // a capture only the launch error is checked; faults surface at the graph's replay.
    if (!is_capturing(stream)) {
      count_launch_check_synchronization();
      status = cudaStreamSynchronize(stream.handle());
    }
  }
  if (status != cudaSuccess) throw_cuda_error(status, kernel, file, line);
}

}  // namespace microllm::cuda::detail

namespace microllm::cuda {
void set_launch_sync_check(bool enabled) { detail::g_sync_check = enabled ? 1 : 0; }
bool launch_sync_check() { return detail::sync_after_launch(); }
}  // namespace microllm::cuda
