// Page-locked host memory, for host↔device copies that run asynchronously on a stream.
//
// The inference engine keeps one PinnedBuffer per direction for its whole life: each step
// writes the step's inputs into it, uploads them with one copy, and later downloads the
// sampled ids into another; neither copy waits. The caller records an Event after a copy
// and waits on it once before the host reads a download or rewrites an upload's bytes.
// Both copies count in transfer_stats() (one call, their bytes) and never synchronize.
#pragma once

#include <cstddef>

#include "microllm/core/tensor.h"
#include "microllm/cuda/runtime.h"

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
  // Grows (never shrinks) to at least `nbytes`; contents are not kept, views are invalidated.
  void reserve(size_t nbytes);

  // A CPU tensor over bytes [offset, offset + shape·dtype) of the buffer, dense; it does not
  // own them (valid until the buffer is destroyed or grows). Offset: a multiple of the dtype.
  Tensor view(const Shape& shape, DType dtype, size_t offset = 0) const;

  // Bytes [offset, offset + dst.nbytes()) → the dense CUDA tensor dst, on `stream`; returns
  // at once (one counted H2D copy). Keep the bytes unchanged until the copy completes.
  void upload(const Tensor& dst, const Stream& stream, size_t offset = 0) const;
  void upload(const Tensor& dst, size_t offset = 0) const;  // on dst's current stream
  // The dense CUDA tensor src → bytes [offset, offset + src.nbytes()), on `stream`; returns
  // at once (one counted D2H copy). Read the bytes only after the copy completes.
  void download(const Tensor& src, const Stream& stream, size_t offset = 0);
  void download(const Tensor& src, size_t offset = 0);  // on src's current stream

 private:
  void check_range(const char* what, const Tensor& t, size_t offset) const;

  void* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace microllm::cuda
