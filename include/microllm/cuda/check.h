// Status checks for the CUDA runtime and cuBLAS(Lt) that throw microllm::Error with the
// failing call, the status name and file:line. Host code only.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include "microllm/core/error.h"

namespace microllm::cuda::detail {
[[noreturn]] void throw_cuda_error(cudaError_t status, const char* call, const char* file,
                                   int line);
[[noreturn]] void throw_cublas_error(cublasStatus_t status, const char* call, const char* file,
                                     int line);
// After a kernel launch: the launch error always; in debug builds (or with
// MICROLLM_CUDA_SYNC_CHECK=1) also a stream synchronization so faults surface at the launch,
// except while the current stream is capturing a CUDA graph (synchronizing it is illegal).
void check_launch(const char* kernel, const char* file, int line);
}  // namespace microllm::cuda::detail

namespace microllm::cuda {
// The synchronizing launch check: on in debug builds, else when MICROLLM_CUDA_SYNC_CHECK is
// set to anything but 0 (read at the first launch); set_launch_sync_check overrides both.
void set_launch_sync_check(bool enabled);
bool launch_sync_check();
}  // namespace microllm::cuda

#define CUDA_CHECK(call)                                                              \
  do {                                                                                \
    cudaError_t status_ = (call);                                                     \
    if (status_ != cudaSuccess)                                                       \
      ::microllm::cuda::detail::throw_cuda_error(status_, #call, __FILE__, __LINE__); \
  } while (0)

#define CUBLAS_CHECK(call)                                                              \
  do {                                                                                  \
    cublasStatus_t status_ = (call);                                                    \
    if (status_ != CUBLAS_STATUS_SUCCESS)                                               \
      ::microllm::cuda::detail::throw_cublas_error(status_, #call, __FILE__, __LINE__); \
  } while (0)

// Checks the last error after a <<<...>>> launch; `name` names the kernel in the message.
#define CUDA_CHECK_LAUNCH(name) ::microllm::cuda::detail::check_launch((name), __FILE__, __LINE__)
