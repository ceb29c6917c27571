// Storage allocation and release through the device backends.
#include "microllm/core/storage.h"

#include "microllm/core/backend.h"

namespace microllm {

std::shared_ptr<Storage> Storage::allocate(size_t nbytes, Device device) {
  DeviceBackend& backend = backend_for(device);
  void* data = nbytes ? backend.allocate(nbytes, device) : nullptr;
  auto deleter = [&backend, nbytes, device](void* ptr) {
    if (ptr) backend.deallocate(ptr, nbytes, device);
  };
  return std::shared_ptr<Storage>(new Storage(data, nbytes, device, deleter));
}

std::shared_ptr<Storage> Storage::wrap(void* data, size_t nbytes, Device device, Deleter deleter) {
  return std::shared_ptr<Storage>(new Storage(data, nbytes, device, std::move(deleter)));
}

Storage::~Storage() {
  if (deleter_) deleter_(data_);
}

}  // namespace microllm
