// Arena: aligned views carved from one Storage (see include/microllm/core/arena.h).
#include "microllm/core/arena.h"

#include <cstdint>
#include <limits>
#include <string>
#include <utility>

#include "microllm/core/error.h"

namespace microllm {
namespace {

int64_t align_up(int64_t n, int64_t unit) { return (n + unit - 1) / unit * unit; }

}  // namespace

Arena::Arena(int64_t bytes, Device device) : capacity_(bytes), device_(device) {
  MICROLLM_CHECK(bytes >= 0, "arena", "capacity must be ≥ 0 bytes, found ", bytes);
  // The backend's alignment is 64 bytes on the CPU and 256 on CUDA; the slack lets the
  // first view start on a 256-byte boundary either way.
  storage_ = Storage::allocate(static_cast<size_t>(bytes + kAlignment), device);
  const auto misalignment =
      static_cast<int64_t>(reinterpret_cast<uintptr_t>(storage_->data()) % kAlignment);
  base_ = misalignment == 0 ? 0 : kAlignment - misalignment;
}

Arena& Arena::operator=(Arena&& other) noexcept {
  if (this != &other) {
    storage_ = std::exchange(other.storage_, nullptr);
    base_ = std::exchange(other.base_, 0);
    capacity_ = std::exchange(other.capacity_, 0);
    used_ = std::exchange(other.used_, 0);
    measuring_ = std::exchange(other.measuring_, false);
    device_ = other.device_;
  }
  return *this;
}

Arena Arena::measure(Device device) {
  Arena planner;
  planner.measuring_ = true;
  planner.device_ = device;
  planner.capacity_ = std::numeric_limits<int64_t>::max();
  return planner;
}

int64_t Arena::aligned_bytes(const Shape& shape, DType dtype) {
  for (int64_t s : shape)
    MICROLLM_CHECK(s >= 0, "arena", "negative size in shape ", shape_str(shape));
  return align_up(shape_numel(shape) * static_cast<int64_t>(dtype_size(dtype)), kAlignment);
}

Tensor Arena::take(const Shape& shape, DType dtype, std::string_view name) {
  const int64_t bytes = aligned_bytes(shape, dtype);
  const std::string what = name.empty() ? std::string() : " '" + std::string(name) + "'";
  MICROLLM_CHECK(bytes <= capacity_ - used_, "arena", "take", what, " of ", dtype, shape_str(shape),
                 " needs ", bytes, " bytes (aligned to ", kAlignment, ") but only ",
                 capacity_ - used_, " of ", capacity_, " bytes remain (", used_, " used)");
  const int64_t offset = used_;
  used_ += bytes;
  if (measuring_ || !storage_) {
    // Metadata only (a planner, or a zero-byte take from an empty arena): a storage that
    // claims the bytes but holds none.
    auto empty = Storage::wrap(nullptr, static_cast<size_t>(bytes), device_, {});
    return Tensor::from_storage(std::move(empty), shape, contiguous_strides(shape), 0, dtype);
  }
  // base_ and offset are multiples of the backend's alignment (≥ 64, a multiple of every
  // dtype size), so the element offset is exact.
  const auto width = static_cast<int64_t>(dtype_size(dtype));
  MICROLLM_CHECK((base_ + offset) % width == 0, "arena", "storage base misaligned for ", dtype);
  const int64_t element_offset = (base_ + offset) / width;
  return Tensor::from_storage(storage_, shape, contiguous_strides(shape), element_offset, dtype);
}

}  // namespace microllm
