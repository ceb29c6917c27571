// NCCL status checks that throw microllm::Error with the failing call, NCCL's error string,
// its last detailed message and file:line — as CUDA_CHECK does for the runtime. Host code
// built with MICROLLM_WITH_NCCL only (includes nccl.h).
#pragma once

#include <nccl.h>

#include "microllm/core/error.h"

namespace microllm::train::detail {
[[noreturn]] void throw_nccl_error(ncclResult_t status, const char* call, const char* file,
                                   int line);
}  // namespace microllm::train::detail

#define NCCL_CHECK(call)                                                               \
  do {                                                                                 \
    ncclResult_t status_ = (call);                                                     \
    if (status_ != ncclSuccess)                                                        \
      ::microllm::train::detail::throw_nccl_error(status_, #call, __FILE__, __LINE__); \
  } while (0)
