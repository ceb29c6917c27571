// Page-locked host memory, for host↔device copies that run asynchronously on a stream.
#pragma once

#include <cstddef>

namespace microllm::cuda {

class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  explicit PinnedBuffer(size_t nbytes);
  ~PinnedBuffer();
  PinnedBuffer(PinnedBuffer&& other) noexcept;
  PinnedBuffer& operator=(PinnedBuffer&& other) noexcept;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;

  void* data() const { return data_; }
  size_t size() const { return size_; }
  // Grows (never shrinks) to at least `nbytes`; contents are not kept.
  void reserve(size_t nbytes);

 private:
  void* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace microllm::cuda
