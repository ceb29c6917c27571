// output_fingerprint (output_fingerprint.h): one grid-stride pass over the buffer's 2-byte
// units; each thread sums its units' hashes and nonzero count, a warp reduction, one atomic
// add per warp into two 64-bit counters.
#include "kernel_utils.cuh"
#include "microllm/core/hash.h"
#include "microllm/cuda/check.h"
#include "microllm/cuda/runtime.h"
#include "output_fingerprint.h"

namespace microllm::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void fingerprint_kernel(const uint16_t* units, int64_t count,
                                   unsigned long long* sums /* [hash, nonzero] */) {
  unsigned long long hash = 0, nonzero = 0;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const uint16_t u = units[i];
    hash += splitmix64_mix((static_cast<uint64_t>(i) << 16) | u);
    nonzero += u != 0;
  }
  for (int offset = kWarp / 2; offset > 0; offset /= 2) {
    hash += __shfl_down_sync(0xffffffffu, hash, offset);
    nonzero += __shfl_down_sync(0xffffffffu, nonzero, offset);
  }
  if (threadIdx.x % kWarp == 0) {
    atomicAdd(sums, hash);
    atomicAdd(sums + 1, nonzero);
  }
}

}  // namespace

OutputFingerprint output_fingerprint(const Tensor& t) {
  MICROLLM_CHECK(t.device().is_cuda() && t.is_contiguous() && dtype_size(t.dtype()) % 2 == 0,
                 "output fingerprint",
                 "expected a dense CUDA tensor of 2- or 4-byte elements, found ", t.describe());
  const Stream stream = current_stream(t.device());
  const Tensor sums = Tensor::zeros({2}, DType::I64, t.device());  // (2) [hash, nonzero]
  const int64_t count = t.numel() * static_cast<int64_t>(dtype_size(t.dtype())) / 2;
  if (count > 0) {
    const int64_t blocks = std::min<int64_t>((count + kThreads - 1) / kThreads, 4096);
    fingerprint_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream.handle()>>>(
        static_cast<const uint16_t*>(t.raw_data()), count,
        static_cast<unsigned long long*>(sums.raw_data()));
    CUDA_CHECK_LAUNCH("fingerprint_kernel");
  }
  const Tensor host = sums.to(Device::cpu());  // waits for the stream
  const int64_t* h = host.data<int64_t>();
  return {static_cast<uint64_t>(h[0]), h[1]};
}

}  // namespace microllm::cuda
