// CUDA rope_qkv_heads: the joined Q/K/V projection's rows (B, T, H + 2·Hkv, D) and the
// attention's dense head-major q (B, H, T, D), k and v (B, Hkv, T, D), either way in one pass,
// with rope's rotation (rope_rotate.cuh) on the query and key heads. The CPU reference is
// rope_qkv_heads_cpu.cpp.
//
// One thread per run of R consecutive pairs (i … i + R − 1, and their partners i + D/2 …) of
// one head row: R = 4 (8-byte accesses in BF16/F16) where D/2 and the pointers allow it, else
// R = 1. Consecutive threads take consecutive runs of one token's heads, so the packed side
// is read (forward) or written (backward) in order and each head row of 2·D bytes in a few
// accesses. The run index is split in 32 bits when it fits; element offsets are 64-bit.
#include "../cuda_common.cuh"
#include "rope_kernels.h"
#include "rope_rotate.cuh"

namespace microllm::ops {
namespace {

using namespace cuda_detail;

// packed (B, T, H + 2·Hkv, D) with D = 2·half; q (B, H, T, D); k, v (B, Hkv, T, D); a null q,
// k or v reads as zeros (backward only). positions (B, T) with row stride pos_stride (0 for
// (T)); inv_freq (half). runs = B·T·(H + 2·Hkv)·half / R.
template <class T, int R, class Index, class I>
__global__ void rope_qkv_heads_kernel(T* packed, T* q, T* k, T* v, const Index* positions,
                                      int64_t pos_stride, const float* inv_freq, bool to_heads,
                                      I runs, I seq, I heads, I kv_heads, I half) {
  const I row_runs = half / R, all_heads = heads + 2 * kv_heads;
  const int64_t D = 2 * static_cast<int64_t>(half);
  for (I r = static_cast<I>(blockIdx.x) * blockDim.x + threadIdx.x; r < runs;
       r += static_cast<I>(gridDim.x) * blockDim.x) {
    const I row = r / row_runs, i = (r - row * row_runs) * R;  // row indexes (B, T, heads)
    const I bt = row / all_heads, j = row - bt * all_heads;
    const I b = bt / seq, t = bt - b * seq;
    // The head's part: 0 queries, 1 keys, 2 values; its head index h within the part.
    const int which = j < heads ? 0 : j < heads + kv_heads ? 1 : 2;
    T* part = which == 0 ? q : which == 1 ? k : v;
    const I count = which == 0 ? heads : kv_heads;
    const I h = which == 0 ? j : which == 1 ? j - heads : j - heads - kv_heads;
    T* packed_row = packed + static_cast<int64_t>(row) * D;
    T* head_row =
        part == nullptr ? nullptr : part + ((static_cast<int64_t>(b) * count + h) * seq + t) * D;
    const T* src = to_heads ? packed_row : head_row;
    T* dst = to_heads ? head_row : packed_row;
    RopeRun<T, R> lo, hi;
    if (src == nullptr) {
#pragma unroll
      for (int e = 0; e < R; ++e) lo.v[e] = hi.v[e] = from_float<T>(0.0f);
    } else {
      lo = *reinterpret_cast<const RopeRun<T, R>*>(src + i);
      hi = *reinterpret_cast<const RopeRun<T, R>*>(src + i + half);
      if (which != 2) {
        // The angle is formed in F32 exactly as on the CPU and in rope's kernels.
        const float position = static_cast<float>(positions[b * pos_stride + t]);
#pragma unroll
        for (int e = 0; e < R; ++e) {
          float y1, y2;
          rope_rotate(to_float(lo.v[e]), to_float(hi.v[e]), position * inv_freq[i + e], !to_heads,
                      y1, y2);
          lo.v[e] = from_float<T>(y1);
          hi.v[e] = from_float<T>(y2);
        }
      }
    }
    *reinterpret_cast<RopeRun<T, R>*>(dst + i) = lo;
    *reinterpret_cast<RopeRun<T, R>*>(dst + i + half) = hi;
  }
}

template <class T, class Index>
void launch_qkv_heads(const Tensor& packed, const Tensor& q, const Tensor& k, const Tensor& v,
                      const Tensor& positions, const Tensor& inv_freq, int64_t heads,
                      int64_t kv_heads, bool to_heads) {
  constexpr int kThreads = 256;
  const int64_t seq = packed.size(1), half = packed.size(3) / 2;
  const int64_t pairs = packed.numel() / 2;
  const int64_t pos_stride = positions.dim() == 2 ? seq : 0;
  T* pq = q.defined() ? ptr<T>(q) : nullptr;
  T* pk = k.defined() ? ptr<T>(k) : nullptr;
  T* pv = v.defined() ? ptr<T>(v) : nullptr;
  // Runs of four where every row start and both halves' runs fall on 4-element boundaries.
  const auto on_runs = [](const void* p) {
    return p == nullptr || reinterpret_cast<uintptr_t>(p) % (4 * sizeof(T)) == 0;
  };
  const bool runs4 =
      half % 4 == 0 && on_runs(packed.raw_data()) && on_runs(pq) && on_runs(pk) && on_runs(pv);
  const auto launch = [&](auto run_tag, auto index_tag) {
    constexpr int R = decltype(run_tag)::value;
    using I = decltype(index_tag);
    rope_qkv_heads_kernel<T, R, Index, I>
        <<<grid_for(pairs / R, kThreads), kThreads, 0, stream_of(packed)>>>(
            ptr<T>(packed), pq, pk, pv, ptr<const Index>(positions), pos_stride,
            ptr<const float>(inv_freq), to_heads, static_cast<I>(pairs / R), static_cast<I>(seq),
            static_cast<I>(heads), static_cast<I>(kv_heads), static_cast<I>(half));
  };
  const bool small = pairs < (int64_t{1} << 31);
  if (runs4)
    small ? launch(std::integral_constant<int, 4>{}, uint32_t{})
          : launch(std::integral_constant<int, 4>{}, int64_t{});
  else
    small ? launch(std::integral_constant<int, 1>{}, uint32_t{})
          : launch(std::integral_constant<int, 1>{}, int64_t{});
  CUDA_CHECK_LAUNCH("rope_qkv_heads_kernel");
}

}  // namespace

void rope_qkv_heads_cuda(const Tensor& packed, const Tensor& q, const Tensor& k, const Tensor& v,
                         const Tensor& positions, const Tensor& inv_freq, int64_t num_heads,
                         int64_t num_kv_heads, bool to_heads) {
  if (packed.numel() == 0) return;
  const bool pos32 = positions.dtype() == DType::I32;
  const auto run = [&](auto tag) {
    using T = decltype(tag);
    if (pos32)
      launch_qkv_heads<T, int32_t>(packed, q, k, v, positions, inv_freq, num_heads, num_kv_heads,
                                   to_heads);
    else
      launch_qkv_heads<T, int64_t>(packed, q, k, v, positions, inv_freq, num_heads, num_kv_heads,
                                   to_heads);
  };
  switch (packed.dtype()) {
    case DType::F32:
      return run(float{});
    case DType::BF16:
      return run(__nv_bfloat16{});
    case DType::F16:
      return run(__half{});
    default:
      MICROLLM_FAIL("rope_qkv_heads", "CUDA kernels take f32, bf16 or f16, found ", packed.dtype());
  }
}

}  // namespace microllm::ops
