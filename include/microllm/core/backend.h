// The small interface every device backend implements, and the registry that finds it.
//
// The CPU backend is always registered. The CUDA backend registers itself when microllm is
// built with MICROLLM_WITH_CUDA; asking for a CUDA device otherwise is a clear Error.
#pragma once

#include <cstddef>

#include "microllm/core/device.h"

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
};

// The backend that serves `device`; throws when microllm was built without it.
DeviceBackend& backend_for(Device device);
// Called once by an optional backend (CUDA) at start-up.
void register_backend(DeviceType type, DeviceBackend* backend);

}  // namespace microllm
