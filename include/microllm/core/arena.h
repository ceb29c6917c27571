// Arena: one allocation carved into aligned tensor views, for workspaces that must not
// allocate after setup (the inference step, CUDA-graph buckets; DESIGN §3).
//
// Memory layout: a single Storage on one device; take() hands out dense row-major views at
// increasing byte offsets, each start rounded up to kAlignment (256 bytes) from a base that
// is itself 256-byte aligned, so every view may be read with 16-byte vector loads and
// cuBLASLt sees its preferred alignment. reset() rewinds the offset: views taken before it
// stay valid memory but alias the views taken after it.
//
// Sizing: an arena made by Arena::measure() owns no memory; its take() returns views with
// the right shape, dtype and device but no data (raw_data() is null) and only counts the
// bytes, so a caller runs its setup once against it and then makes Arena(planner.used(), d).
// Arena::aligned_bytes(shape, dtype) is the size one take of that shape consumes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>
#include <utility>

#include "microllm/core/device.h"
#include "microllm/core/dtype.h"
#include "microllm/core/shape.h"
#include "microllm/core/storage.h"
#include "microllm/core/tensor.h"

namespace microllm {

class Arena {
 public:
  static constexpr int64_t kAlignment = 256;

  Arena() = default;  // an empty arena: capacity 0, every non-empty take overflows
  // Allocates `bytes` (≥ 0) of usable space on `device` (plus at most kAlignment of slack).
  Arena(int64_t bytes, Device device);
  // A planner: takes succeed without memory and only advance used().
  static Arena measure(Device device = Device::cpu());
  // Bytes one take of (shape, dtype) consumes: the dense size rounded up to kAlignment.
  static int64_t aligned_bytes(const Shape& shape, DType dtype);

  // A moved-from arena is empty (capacity 0).
  Arena(Arena&& other) noexcept { *this = std::move(other); }
  Arena& operator=(Arena&& other) noexcept;
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;

  // A dense view of `shape` and `dtype` at the next aligned offset; `name` (optional)
  // names the buffer in the overflow Error, which also gives the bytes requested and left.
  Tensor take(const Shape& shape, DType dtype, std::string_view name = {});
  // Rewinds to empty; the memory is kept.
  void reset() { used_ = 0; }

  int64_t used() const { return used_; }          // bytes consumed by takes since reset
  int64_t capacity() const { return capacity_; }  // usable bytes (planner: unbounded)
  int64_t remaining() const { return capacity_ - used_; }
  bool measuring() const { return measuring_; }
  Device device() const { return device_; }
  // The one allocation every view shares (null for a planner or an empty arena).
  const std::shared_ptr<Storage>& storage() const { return storage_; }

 private:
  std::shared_ptr<Storage> storage_;
  int64_t base_ = 0;  // byte offset of the first aligned byte inside storage_
  int64_t capacity_ = 0;
  int64_t used_ = 0;
  bool measuring_ = false;
  Device device_ = Device::cpu();
};

}  // namespace microllm
