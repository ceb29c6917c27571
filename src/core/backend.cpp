// The CPU backend (64-byte aligned host memory, memcpy, strided converting copies) and the
// lookup of a device's backend.
#include "microllm/core/backend.h"

#include <cstdlib>
#include <cstring>

#include "microllm/core/element.h"
#include "microllm/core/error.h"
#include "microllm/core/strided_loop.h"

namespace microllm {
namespace {

class CpuBackend final : public DeviceBackend {
 public:
  void* allocate(size_t nbytes, Device) override {
    // 64 bytes: a cache line, and enough for any SIMD load.
    const size_t rounded = (nbytes + 63) / 64 * 64;
    void* ptr = std::aligned_alloc(64, rounded);
    MICROLLM_CHECK(ptr != nullptr, "cpu allocator", "out of host memory allocating ", nbytes,
                   " bytes");
    return ptr;
  }
  void deallocate(void* ptr, size_t, Device) override { std::free(ptr); }
  void copy(void* dst, Device dst_device, const void* src, Device src_device,
            size_t nbytes) override {
    MICROLLM_CHECK(dst_device.is_cpu() && src_device.is_cpu(), "cpu backend", "cannot copy from ",
                   src_device, " to ", dst_device);
    if (nbytes) std::memcpy(dst, src, nbytes);
  }
  void memset_zero(void* ptr, size_t nbytes, Device) override {
    if (nbytes) std::memset(ptr, 0, nbytes);
  }
  void copy_tensor(const Tensor& dst, const Tensor& src) override;
  void arange(const Tensor& dst, int64_t start) override {
    void* base = dst.raw_data();
    const int64_t n = dst.numel();
    // Integer targets through integer casts (exact, wrapping like the CUDA kernel).
    switch (dst.dtype()) {
      case DType::I64:
        for (int64_t i = 0; i < n; ++i) static_cast<int64_t*>(base)[i] = start + i;
        return;
      case DType::I32:
        for (int64_t i = 0; i < n; ++i)
          static_cast<int32_t*>(base)[i] = static_cast<int32_t>(start + i);
        return;
      case DType::I8:
        for (int64_t i = 0; i < n; ++i)
          static_cast<int8_t*>(base)[i] = static_cast<int8_t>(start + i);
        return;
      case DType::U8:
        for (int64_t i = 0; i < n; ++i)
          static_cast<uint8_t*>(base)[i] = static_cast<uint8_t>(start + i);
        return;
      case DType::Bool:
        for (int64_t i = 0; i < n; ++i) static_cast<uint8_t*>(base)[i] = start + i != 0 ? 1 : 0;
        return;
      default:
        for (int64_t i = 0; i < n; ++i)
          store_element(base, i, dst.dtype(), static_cast<double>(start + i));
        return;
    }
  }
  void fill(const Tensor& dst, double value) override {
    void* base = dst.raw_data();
    const DType dt = dst.dtype();
    strided_loop<1>(
        dst.shape(), {dst.strides().data()},
        [&](int64_t, const std::array<int64_t, 1>& o) { store_element(base, o[0], dt, value); });
  }
};

void CpuBackend::copy_tensor(const Tensor& dst, const Tensor& src) {
  const DType dt = dst.dtype(), st = src.dtype();
  void* dst_base = dst.raw_data();
  const void* src_base = src.raw_data();
  const std::array<const int64_t*, 2> strides{dst.strides().data(), src.strides().data()};
  if (dt == st && dst.is_contiguous() && src.is_contiguous()) {
    std::memcpy(dst_base, src_base, dst.nbytes());
  } else if (dt == st) {
    const size_t width = dtype_size(dt);
    strided_loop<2>(dst.shape(), strides, [&](int64_t, const std::array<int64_t, 2>& o) {
      std::memcpy(static_cast<char*>(dst_base) + o[0] * width,
                  static_cast<const char*>(src_base) + o[1] * width, width);
    });
  } else if (is_integral(dt) && is_integral(st)) {
    // Integer to integer through int64, so large ids survive exactly.
    strided_loop<2>(dst.shape(), strides, [&](int64_t, const std::array<int64_t, 2>& o) {
      int64_t v = 0;
      switch (st) {
        case DType::I64:
          v = static_cast<const int64_t*>(src_base)[o[1]];
          break;
        case DType::I32:
          v = static_cast<const int32_t*>(src_base)[o[1]];
          break;
        case DType::I8:
          v = static_cast<const int8_t*>(src_base)[o[1]];
          break;
        default:
          v = static_cast<int64_t>(load_element(src_base, o[1], st));
          break;
      }
      if (dt == DType::I64)
        static_cast<int64_t*>(dst_base)[o[0]] = v;
      else
        store_element(dst_base, o[0], dt, static_cast<double>(v));
    });
  } else {
    strided_loop<2>(dst.shape(), strides, [&](int64_t, const std::array<int64_t, 2>& o) {
      store_element(dst_base, o[0], dt, load_element(src_base, o[1], st));
    });
  }
}

CpuBackend g_cpu_backend;

}  // namespace

DeviceBackend& backend_for(Device device) {
  if (device.is_cpu()) return g_cpu_backend;
#if MICROLLM_WITH_CUDA
  return cuda_backend();
#else
  MICROLLM_FAIL("device", "device ", device,
                " is not available: microllm was built without CUDA (configure with the "
                "cuda-release preset or -DMICROLLM_WITH_CUDA=ON)");
#endif
}

}  // namespace microllm
