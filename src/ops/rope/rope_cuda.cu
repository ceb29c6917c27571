// CUDA RoPE, Hugging Face rotate-half convention (Su et al. 2021; HF
// modeling_llama.apply_rotary_pos_emb). F32/BF16/F16 storage, F32 arithmetic; the CPU
// reference is rope_cpu.cpp.
//
// Layout: x, y dense (B, H, T, D); positions dense (B, T) or (T) (shared by the batch), I32 or
// I64; inv_freq dense (D/2) F32. y may be x (in place: each thread reads its pair, then
// writes it). Pair (i, i + D/2) of row (b, h, t) turns by θ = float(position[b, t]) · inv_freq[i]
// (−θ when `inverse`, the backward):
//   y[i] = x[i]·cos θ − x[i + D/2]·sin θ;  y[i + D/2] = x[i + D/2]·cos θ + x[i]·sin θ
// One thread per pair: consecutive threads take consecutive i, so both halves of a row are
// read and written coalesced.
#include "../cuda_common.cuh"
#include "rope_kernels.h"
#include "rope_rotate.cuh"

namespace microllm::ops {
namespace {

using namespace cuda_detail;

// x, y (B, H, T, D) with D = 2·half; positions (B, T) with row stride pos_stride (0 for (T));
// inv_freq (half); pairs = B·H·T·half.
template <class T, class Index>
__global__ void rope_kernel(const T* x, const Index* positions, int64_t pos_stride,
                            const float* inv_freq, bool inverse, T* y, int64_t pairs, int64_t heads,
                            int64_t seq, int64_t half) {
  for (int64_t p = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; p < pairs;
       p += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t i = p % half, row = p / half;  // row indexes (B, H, T)
    const int64_t t = row % seq, b = row / (heads * seq);
    // The angle is formed in F32 exactly as on the CPU.
    const float angle = static_cast<float>(positions[b * pos_stride + t]) * inv_freq[i];
    const int64_t lo = row * 2 * half + i, hi = lo + half;  // offsets into the (D) row
    float y1, y2;
    rope_rotate(to_float(x[lo]), to_float(x[hi]), angle, inverse, y1, y2);
    y[lo] = from_float<T>(y1);
    y[hi] = from_float<T>(y2);
  }
}

}  // namespace

// One launch for storage type T and position type Index (a plain function template: the
// kernel's instantiation is named explicitly, not through nested generic lambdas).
template <class T, class Index>
void launch_rope(const Tensor& x, const Tensor& positions, int64_t pos_stride,
                 const Tensor& inv_freq, bool inverse, const Tensor& y, int64_t pairs,
                 int64_t heads, int64_t seq, int64_t half) {
  constexpr int kThreads = 256;
  rope_kernel<T, Index><<<grid_for(pairs, kThreads), kThreads, 0, stream_of(x)>>>(
      ptr<const T>(x), ptr<const Index>(positions), pos_stride, ptr<const float>(inv_freq), inverse,
      ptr<T>(y), pairs, heads, seq, half);
  CUDA_CHECK_LAUNCH("rope_kernel");
}

void rope_cuda(const Tensor& x, const Tensor& positions, const Tensor& inv_freq, bool inverse,
               const Tensor& y) {
  const int64_t heads = x.size(1), seq = x.size(2), half = x.size(3) / 2;
  const int64_t pairs = x.numel() / 2;
  if (pairs == 0) return;
  const int64_t pos_stride = positions.dim() == 2 ? seq : 0;
  const bool pos32 = positions.dtype() == DType::I32;
  switch (x.dtype()) {
    case DType::F32:
      return pos32 ? launch_rope<float, int32_t>(x, positions, pos_stride, inv_freq, inverse, y,
                                                 pairs, heads, seq, half)
                   : launch_rope<float, int64_t>(x, positions, pos_stride, inv_freq, inverse, y,
                                                 pairs, heads, seq, half);
    case DType::BF16:
      return pos32 ? launch_rope<__nv_bfloat16, int32_t>(x, positions, pos_stride, inv_freq,
                                                         inverse, y, pairs, heads, seq, half)
                   : launch_rope<__nv_bfloat16, int64_t>(x, positions, pos_stride, inv_freq,
                                                         inverse, y, pairs, heads, seq, half);
    case DType::F16:
      return pos32 ? launch_rope<__half, int32_t>(x, positions, pos_stride, inv_freq, inverse, y,
                                                  pairs, heads, seq, half)
                   : launch_rope<__half, int64_t>(x, positions, pos_stride, inv_freq, inverse, y,
                                                  pairs, heads, seq, half);
    default:
      MICROLLM_FAIL("rope", "CUDA kernels take f32, bf16 or f16, found ", x.dtype());
  }
}

}  // namespace microllm::ops
