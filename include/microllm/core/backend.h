// The small interface every device backend implements, and the registry that finds it.
//
// The CPU backend always exists; the CUDA backend exists when microllm is built with
// MICROLLM_WITH_CUDA. Asking for a CUDA device otherwise is a clear Error.
#pragma once

#include <cstddef>

#include "microllm/core/device.h"
#include "microllm/core/tensor.h"

namespace microllm {

class DeviceBackend {
 public:
  virtual ~DeviceBackend() = default;
  virtual void* allocate(size_t nbytes, Device device) = 0;
  virtual void deallocate(void* ptr, size_t nbytes, Device device) = 0;
  // Copies `nbytes` between two devices, at least one of which belongs to this backend.
  // Copies are ordered on the current stream; a device→host copy completes before return.
  virtual void copy(void* dst, Device dst_device, const void* src, Device src_device,
                    size_t nbytes) = 0;
  virtual void memset_zero(void* ptr, size_t nbytes, Device device) = 0;
  // dst = src element by element, both on this backend's device, any strides, converting
  // dtypes (floating targets round to nearest even, FP8 saturates, integers truncate).
  virtual void copy_tensor(const Tensor& dst, const Tensor& src) = 0;
  // Sets every element of dst (any strides) to `value` converted to dst's dtype.
  virtual void fill(const Tensor& dst, double value) = 0;
  // dst[i] = start + i for a dense 1-D dst, converted to dst's dtype (integers exactly).
  // Computed where dst lives: on CUDA a kernel, so no host memory is copied.
  virtual void arange(const Tensor& dst, int64_t start) = 0;
};

// The backend that serves `device`; throws when microllm was built without it.
DeviceBackend& backend_for(Device device);

#if MICROLLM_WITH_CUDA
DeviceBackend& cuda_backend();  // src/cuda/cuda_backend.cpp
#endif

}  // namespace microllm
