// Error reporting for CUDA and cuBLAS status codes.
#include "microllm/cuda/check.h"

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
bool sync_after_launch() {
#ifndef NDEBUG
  return true;
#else
  static const bool enabled = [] {
    const char* value = std::getenv("MICROLLM_CUDA_SYNC_CHECK");
    return value && std::strcmp(value, "0") != 0;
  }();
  return enabled;
#endif
}
}  // namespace

void check_launch(const char* kernel, const char* file, int line) {
  cudaError_t status = cudaGetLastError();
  if (status == cudaSuccess && sync_after_launch()) {
    int device = 0;
    cudaGetDevice(&device);
    status = cudaStreamSynchronize(current_stream_handle(Device::cuda(device)));
  }
  if (status != cudaSuccess) throw_cuda_error(status, kernel, file, line);
}

}  // namespace microllm::cuda::detail
