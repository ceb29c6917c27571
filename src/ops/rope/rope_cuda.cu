// CUDA RoPE, Hugging Face rotate-half convention (Su et al. 2021; HF
// modeling_llama.apply_rotary_pos_emb). F32/BF16/F16 storage, F32 arithmetic; the CPU
// reference is rope_cpu.cpp.
//
// Layout: x, y (B, H, T, D), each with unit stride along D and its own strides over B, H, T
// (the model's transposed (B, T, H, D) projections are read, and their gradients written,
// without a copy); positions dense (B, T) or (T) (shared by the batch), I32 or I64; inv_freq
// dense (D/2) F32. y may be x (in place: each thread reads its pair, then writes it). Pair
// (i, i + D/2) of row (b, h, t) turns by θ = float(position[b, t]) · inv_freq[i] (−θ when
// `inverse`, the backward):
//   y[i] = x[i]·cos θ − x[i + D/2]·sin θ;  y[i + D/2] = x[i + D/2]·cos θ + x[i]·sin θ
// By default (MICROLLM_ROPE_RUNS=0 turns it off, docs/optimization-log.md), one thread per run of
// 4 consecutive pairs (i … i + 3) where D/2, the row strides and the pointers allow 4-element
// accesses (8 bytes in BF16/F16, 16 in F32); otherwise one per pair:
// consecutive threads take consecutive i, so both halves of a row are read and written
// coalesced. The run (pair) index is split into (b, h, t, i) in 32 bits when it fits (64-bit
// division costs several times more). A run loads its position once and divides once for
// four pairs: the per-pair kernel is bound by those instructions, not by DRAM.
#include "../cuda_common.cuh"
#include "microllm/core/switch.h"
#include "rope_kernels.h"
#include "rope_rotate.cuh"

namespace microllm::ops {
namespace {

using namespace cuda_detail;

struct RowStrides {
  int64_t b, h, t;  // elements between rows along B, H, T
};

constexpr int kRun = 4;  // pairs a thread of rope_runs_kernel takes

template <class T>
using Run = RopeRun<T, kRun>;

// x, y (B, H, T, D) with D = 2·half and row strides xs, ys; positions (B, T) with row stride
// pos_stride (0 for (T)); inv_freq (half); pairs = B·H·T·half. I: the index type of the split.
template <class T, class Index, class I>
__global__ void rope_kernel(const T* x, RowStrides xs, const Index* positions, int64_t pos_stride,
                            const float* inv_freq, bool inverse, T* y, RowStrides ys, I pairs,
                            I heads, I seq, I half) {
  for (I p = static_cast<I>(blockIdx.x) * blockDim.x + threadIdx.x; p < pairs;
       p += static_cast<I>(gridDim.x) * blockDim.x) {
    const I row = p / half, i = p - row * half;  // row indexes (B, H, T)
    const I bh = row / seq, t = row - bh * seq;
    const I b = bh / heads, h = bh - b * heads;
    // The angle is formed in F32 exactly as on the CPU.
    const float angle = static_cast<float>(positions[b * pos_stride + t]) * inv_freq[i];
    const T* xr = x + b * xs.b + h * xs.h + t * xs.t;
    T* yr = y + b * ys.b + h * ys.h + t * ys.t;
    float y1, y2;
    rope_rotate(to_float(xr[i]), to_float(xr[i + half]), angle, inverse, y1, y2);
    yr[i] = from_float<T>(y1);
    yr[i + half] = from_float<T>(y2);
  }
}

// As rope_kernel, a thread per run of kRun pairs i = kRun·j … kRun·j + kRun − 1 of a row:
// runs = B·H·T·half / kRun, quarter = half / kRun; every row start is kRun-element aligned.
template <class T, class Index, class I>
__global__ void rope_runs_kernel(const T* x, RowStrides xs, const Index* positions,
                                 int64_t pos_stride, const float* inv_freq, bool inverse, T* y,
                                 RowStrides ys, I runs, I heads, I seq, I half, I quarter) {
  for (I r = static_cast<I>(blockIdx.x) * blockDim.x + threadIdx.x; r < runs;
       r += static_cast<I>(gridDim.x) * blockDim.x) {
    const I row = r / quarter, i = (r - row * quarter) * kRun;  // row indexes (B, H, T)
    const I bh = row / seq, t = row - bh * seq;
    const I b = bh / heads, h = bh - b * heads;
    const float position = static_cast<float>(positions[b * pos_stride + t]);
    const T* xr = x + b * xs.b + h * xs.h + t * xs.t;
    T* yr = y + b * ys.b + h * ys.h + t * ys.t;
    const Run<T> lo = *reinterpret_cast<const Run<T>*>(xr + i);
    const Run<T> hi = *reinterpret_cast<const Run<T>*>(xr + i + half);
    Run<T> out_lo, out_hi;
#pragma unroll
    for (int k = 0; k < kRun; ++k) {
      float y1, y2;  // the angle is formed in F32 exactly as on the CPU
      rope_rotate(to_float(lo.v[k]), to_float(hi.v[k]), position * inv_freq[i + k], inverse, y1,
                  y2);
      out_lo.v[k] = from_float<T>(y1);
      out_hi.v[k] = from_float<T>(y2);
    }
    *reinterpret_cast<Run<T>*>(yr + i) = out_lo;
    *reinterpret_cast<Run<T>*>(yr + i + half) = out_hi;
  }
}

RowStrides row_strides(const Tensor& t) { return {t.stride(0), t.stride(1), t.stride(2)}; }

// The runs kernel where the layout allows, unless MICROLLM_ROPE_RUNS=0 (read at each call, so
// tests can switch it).
bool rope_runs_enabled() { return !switch_off("MICROLLM_ROPE_RUNS"); }

// Whether rope_runs_kernel may take t (B, H, T, D) with D/2 = half: every row start and both
// halves' runs on kRun-element boundaries.
bool runs_fit(const Tensor& t, int64_t half) {
  const auto address = reinterpret_cast<uintptr_t>(t.raw_data());
  return half % kRun == 0 && address % (kRun * dtype_size(t.dtype())) == 0 &&
         t.stride(0) % kRun == 0 && t.stride(1) % kRun == 0 && t.stride(2) % kRun == 0;
}

}  // namespace

// One launch for storage type T and position type Index (a plain function template: the
// kernel's instantiation is named explicitly, not through nested generic lambdas).
template <class T, class Index>
void launch_rope(const Tensor& x, const Tensor& positions, int64_t pos_stride,
                 const Tensor& inv_freq, bool inverse, const Tensor& y, int64_t pairs,
                 int64_t heads, int64_t seq, int64_t half) {
  constexpr int kThreads = 256;
  const bool runs = rope_runs_enabled() && runs_fit(x, half) && runs_fit(y, half);
  const auto launch = [&](auto index_tag) {
    using I = decltype(index_tag);
    if (runs)
      rope_runs_kernel<T, Index, I>
          <<<grid_for(pairs / kRun, kThreads), kThreads, 0, stream_of(x)>>>(
              ptr<const T>(x), row_strides(x), ptr<const Index>(positions), pos_stride,
              ptr<const float>(inv_freq), inverse, ptr<T>(y), row_strides(y),
              static_cast<I>(pairs / kRun), static_cast<I>(heads), static_cast<I>(seq),
              static_cast<I>(half), static_cast<I>(half / kRun));
    else
      rope_kernel<T, Index, I><<<grid_for(pairs, kThreads), kThreads, 0, stream_of(x)>>>(
          ptr<const T>(x), row_strides(x), ptr<const Index>(positions), pos_stride,
          ptr<const float>(inv_freq), inverse, ptr<T>(y), row_strides(y), static_cast<I>(pairs),
          static_cast<I>(heads), static_cast<I>(seq), static_cast<I>(half));
  };
  if (pairs < (int64_t{1} << 31))
    launch(uint32_t{});
  else
    launch(int64_t{});
  CUDA_CHECK_LAUNCH(runs ? "rope_runs_kernel" : "rope_kernel");
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
