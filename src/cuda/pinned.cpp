// Page-locked host buffers (cudaHostAlloc) and their asynchronous, counted copies.
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

Tensor PinnedBuffer::view(const Shape& shape, DType dtype, size_t offset) const {
  const size_t width = dtype_size(dtype);
  const auto bytes = static_cast<size_t>(shape_numel(shape)) * width;
  MICROLLM_CHECK(offset % width == 0 && offset + bytes <= size_, "pinned buffer", "view ", dtype,
                 shape_str(shape), " at byte ", offset, " does not fit the ", size_,
                 "-byte buffer (or is misaligned for ", dtype, ")");
  auto storage = Storage::wrap(data_, size_, Device::cpu(), {});  // the buffer owns the bytes
  return Tensor::from_storage(std::move(storage), shape, contiguous_strides(shape),
                              static_cast<int64_t>(offset / width), dtype);
}

void PinnedBuffer::check_range(const char* what, const Tensor& t, size_t offset) const {
  MICROLLM_CHECK(t.defined() && t.is_cuda() && t.is_contiguous(), "pinned buffer", what,
                 " needs a dense CUDA tensor, found ", t.describe());
  MICROLLM_CHECK(offset + t.nbytes() <= size_, "pinned buffer", what, " of ", t.describe(), " (",
                 t.nbytes(), " bytes) at byte ", offset, " does not fit the ", size_,
                 "-byte buffer");
}

void PinnedBuffer::upload(const Tensor& dst, const Stream& stream, size_t offset) const {
  check_range("upload", dst, offset);
  MICROLLM_CHECK(stream.device() == dst.device(), "pinned buffer", "upload to ", dst.describe(),
                 " on a stream of ", stream.device());
  if (dst.nbytes() == 0) return;
  CUDA_CHECK(cudaMemcpyAsync(dst.raw_data(), static_cast<const char*>(data_) + offset, dst.nbytes(),
                             cudaMemcpyHostToDevice, stream.handle()));
  count_transfer(cudaMemcpyHostToDevice, dst.nbytes());
}

void PinnedBuffer::upload(const Tensor& dst, size_t offset) const {
  check_range("upload", dst, offset);
  upload(dst, current_stream(dst.device()), offset);
}

void PinnedBuffer::download(const Tensor& src, const Stream& stream, size_t offset) {
  check_range("download", src, offset);
  MICROLLM_CHECK(stream.device() == src.device(), "pinned buffer", "download from ", src.describe(),
                 " on a stream of ", stream.device());
  if (src.nbytes() == 0) return;
  CUDA_CHECK(cudaMemcpyAsync(static_cast<char*>(data_) + offset, src.raw_data(), src.nbytes(),
                             cudaMemcpyDeviceToHost, stream.handle()));
  count_transfer(cudaMemcpyDeviceToHost, src.nbytes());
}

void PinnedBuffer::download(const Tensor& src, size_t offset) {
  check_range("download", src, offset);
  download(src, current_stream(src.device()), offset);
}

}  // namespace microllm::cuda
