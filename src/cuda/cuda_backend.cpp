// The CUDA DeviceBackend: memory from the caching allocator, copies on the current stream
// (counted), strided copies and fills by kernel.
#include "microllm/core/backend.h"
#include "microllm/cuda/allocator.h"
#include "microllm/cuda/check.h"
#include "microllm/cuda/runtime.h"
#include "tensor_kernels.h"

namespace microllm {
namespace {

class CudaBackend final : public DeviceBackend {
 public:
  void* allocate(size_t nbytes, Device device) override { return cuda::allocate(nbytes, device); }
  void deallocate(void* ptr, size_t, Device) override { cuda::deallocate(ptr); }

  void copy(void* dst, Device dst_device, const void* src, Device src_device,
            size_t nbytes) override {
    if (nbytes == 0) return;
    if (dst_device.is_cuda() && src_device.is_cuda() && dst_device != src_device) {
      const cudaStream_t stream = cuda::current_stream_handle(dst_device);
      CUDA_CHECK(cudaMemcpyPeerAsync(dst, dst_device.index, src, src_device.index, nbytes, stream));
      cuda::count_transfer(cudaMemcpyDeviceToDevice, nbytes);
      return;
    }
    const Device gpu = dst_device.is_cuda() ? dst_device : src_device;
    const cuda::Stream stream = cuda::current_stream(gpu);
    const cudaMemcpyKind kind = dst_device.is_cpu()   ? cudaMemcpyDeviceToHost
                                : src_device.is_cpu() ? cudaMemcpyHostToDevice
                                                      : cudaMemcpyDeviceToDevice;
    CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, kind, stream.handle()));
    cuda::count_transfer(kind, nbytes);
    // The host may read (or free) its side as soon as we return.
    if (kind == cudaMemcpyDeviceToHost) cuda::synchronize(stream);
  }

  void memset_zero(void* ptr, size_t nbytes, Device device) override {
    if (nbytes) CUDA_CHECK(cudaMemsetAsync(ptr, 0, nbytes, cuda::current_stream_handle(device)));
  }
  void copy_tensor(const Tensor& dst, const Tensor& src) override { cuda::copy_tensor(dst, src); }
  void fill(const Tensor& dst, double value) override { cuda::fill_tensor(dst, value); }
  void arange(const Tensor& dst, int64_t start) override { cuda::arange_tensor(dst, start); }
};

}  // namespace

DeviceBackend& cuda_backend() {
  static CudaBackend backend;
  return backend;
}

}  // namespace microllm
