// Storage: a reference-counted block of bytes on one device.
//
// Tensors are views into a Storage. The bytes come from the device's backend (aligned host
// memory, the CUDA caching allocator) or from outside (a memory-mapped file), in which case
// the caller supplies the function that releases them.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>

#include "microllm/core/device.h"

namespace microllm {

class Storage {
 public:
  using Deleter = std::function<void(void*)>;

  // Allocates `nbytes` on `device` through its backend.
  static std::shared_ptr<Storage> allocate(size_t nbytes, Device device);
  // Wraps memory owned elsewhere; `deleter` runs when the last view is gone (may be empty).
  static std::shared_ptr<Storage> wrap(void* data, size_t nbytes, Device device, Deleter deleter);

  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  ~Storage();

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }

 private:
  Storage(void* data, size_t nbytes, Device device, Deleter deleter)
      : data_(data), nbytes_(nbytes), device_(device), deleter_(std::move(deleter)) {}

  void* data_;
  size_t nbytes_;
  Device device_;
  Deleter deleter_;
};

}  // namespace microllm
