// The backend registry and the CPU backend (64-byte aligned host memory, memcpy).
#include "microllm/core/backend.h"

#include <cstdlib>
#include <cstring>
#include <new>

#include "microllm/core/error.h"

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
    MICROLLM_CHECK(dst_device.is_cpu() && src_device.is_cpu(), "cpu backend",
                   "cannot copy from ", src_device, " to ", dst_device);
    if (nbytes) std::memcpy(dst, src, nbytes);
  }
  void memset_zero(void* ptr, size_t nbytes, Device) override {
    if (nbytes) std::memset(ptr, 0, nbytes);
  }
};

CpuBackend g_cpu_backend;
DeviceBackend* g_backends[2] = {&g_cpu_backend, nullptr};

}  // namespace

DeviceBackend& backend_for(Device device) {
  DeviceBackend* backend = g_backends[static_cast<int>(device.type)];
  MICROLLM_CHECK(backend != nullptr, "device", "device ", device,
                 " is not available: microllm was built without CUDA (configure with the "
                 "cuda-release preset or -DMICROLLM_WITH_CUDA=ON)");
  return *backend;
}

void register_backend(DeviceType type, DeviceBackend* backend) {
  g_backends[static_cast<int>(type)] = backend;
}

}  // namespace microllm
