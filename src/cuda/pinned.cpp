// Page-locked host buffers (cudaHostAlloc).
#include "microllm/cuda/pinned.h"

#include <utility>

#include "microllm/cuda/check.h"

namespace microllm::cuda {

PinnedBuffer::PinnedBuffer(size_t nbytes) { reserve(nbytes); }

PinnedBuffer::~PinnedBuffer() {
  if (data_) cudaFreeHost(data_);
}

PinnedBuffer::PinnedBuffer(PinnedBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

PinnedBuffer& PinnedBuffer::operator=(PinnedBuffer&& other) noexcept {
  if (this != &other) {
    if (data_) cudaFreeHost(data_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

void PinnedBuffer::reserve(size_t nbytes) {
  if (nbytes <= size_) return;
  if (data_) CUDA_CHECK(cudaFreeHost(data_));
  data_ = nullptr;
  size_ = 0;
  CUDA_CHECK(cudaHostAlloc(&data_, nbytes, cudaHostAllocDefault));
  size_ = nbytes;
}

}  // namespace microllm::cuda
