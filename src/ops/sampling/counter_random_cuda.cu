// CUDA counter_random: out[b, v] ← the counter-based draw of (seeds[b], positions[b], v),
// one element per thread of a grid-stride loop, through the same inline functions as the
// host (core/counter_rng.h), so both devices give the same bits.
#include <cstdint>

#include "../cuda_common.cuh"
#include "microllm/core/counter_rng.h"
#include "sampling_kernels.h"

namespace microllm::ops {
namespace {

using namespace cuda_detail;

enum class DrawKind { Bits, F32, F64 };

__global__ void counter_random_kernel(const int64_t* seeds, const void* positions,
                                      bool positions_i64, int64_t batch, int64_t lanes,
                                      DrawKind kind, void* out) {
  const int64_t total = batch * lanes;
  for (int64_t at = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; at < total;
       at += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t b = at / lanes;
    const uint64_t lane = static_cast<uint64_t>(at % lanes);
    const uint64_t seed = static_cast<uint64_t>(seeds[b]);
    const uint64_t position =
        positions_i64 ? static_cast<uint64_t>(static_cast<const int64_t*>(positions)[b])
                      : static_cast<uint64_t>(
                            static_cast<int64_t>(static_cast<const int32_t*>(positions)[b]));
    if (kind == DrawKind::Bits)
      static_cast<int64_t*>(out)[at] = static_cast<int64_t>(counter_u64(seed, position, lane));
    else if (kind == DrawKind::F32)
      static_cast<float*>(out)[at] = counter_uniform_f32(seed, position, lane);
    else
      static_cast<double*>(out)[at] = counter_uniform_f64(seed, position, lane);
  }
}

}  // namespace

void counter_random_cuda(const Tensor& seeds, const Tensor& positions, const Tensor& out) {
  const int64_t batch = out.size(0), lanes = out.size(1);
  const DrawKind kind = out.dtype() == DType::I64   ? DrawKind::Bits
                        : out.dtype() == DType::F32 ? DrawKind::F32
                                                    : DrawKind::F64;
  constexpr int kThreads = 256;
  counter_random_kernel<<<grid_for(batch * lanes, kThreads), kThreads, 0, stream_of(out)>>>(
      ptr<const int64_t>(seeds), positions.raw_data(), positions.dtype() == DType::I64, batch,
      lanes, kind, out.raw_data());
  CUDA_CHECK_LAUNCH("counter_random_kernel");
}

}  // namespace microllm::ops
