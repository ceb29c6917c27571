// CUDA rope_kv_write: RoPE on q and k and the KV-cache write in one kernel, the same values as
// cast_out + rope_out + kv_write (kv_write.h). One thread per item of three ranges, in
// order: the (n, h, i) pairs of q (N·H·D/2), the pairs of k (N·Hkv·D/2) and the elements of
// v (N·Hkv·D). A q or k pair is rotated (rope_rotate, as rope_kernel does) and written to
// q_out / k_out; k's rounded pair and v's elements also go to the row's cache slot when it
// is ≥ 0, converted as kv_write converts. Each output element has one writer; an in-place
// call (q_out = q) reads its pair before writing it.
#include "../cuda_common.cuh"
#include "../rope/rope_rotate.cuh"
#include "kv_write_kernels.h"

namespace microllm::ops {
namespace {

using namespace cuda_detail;

constexpr int kThreads = 256;

template <class T, class CacheT>
__global__ void rope_kv_write_kernel(RopeKvWriteShape s, const T* q, const T* k, const T* v,
                                     const int32_t* positions, const float* inv_freq,
                                     const int32_t* slots, T* q_out, T* k_out, CacheT* k_cache,
                                     CacheT* v_cache) {
  enter_dependent_grid();  // launched as a dependent grid
  const int64_t half = s.D / 2;
  const int64_t q_pairs = s.N * s.H * half, k_pairs = s.N * s.Hkv * half;
  const int64_t v_items = s.N * s.Hkv * s.D, total = q_pairs + k_pairs + v_items;
  for (int64_t p = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; p < total;
       p += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    if (p < q_pairs + k_pairs) {
      const bool is_q = p < q_pairs;
      const int64_t e = is_q ? p : p - q_pairs;
      const int64_t heads = is_q ? s.H : s.Hkv;
      const int64_t i = e % half, h = (e / half) % heads, n = e / (half * heads);
      const T* row = (is_q ? q + n * s.q_row_stride : k + n * s.k_row_stride) + h * s.D;
      const float angle = static_cast<float>(positions[n]) * inv_freq[i];
      float y1, y2;
      rope_rotate(to_float(row[i]), to_float(row[i + half]), angle, false, y1, y2);
      const T r1 = from_float<T>(y1), r2 = from_float<T>(y2);
      T* out = (is_q ? q_out + n * s.H * s.D : k_out + n * s.Hkv * s.D) + h * s.D;
      out[i] = r1;
      out[i + half] = r2;
      const int64_t slot = is_q ? -1 : slots[n];
      if (slot >= 0) {
        CacheT* cache = k_cache + (slot * s.Hkv + h) * s.D;
        cache[i] = from_float<CacheT>(to_float(r1));
        cache[i + half] = from_float<CacheT>(to_float(r2));
      }
    } else {
      const int64_t e = p - q_pairs - k_pairs;  // over (N, Hkv·D)
      const int64_t width = s.Hkv * s.D, n = e / width, j = e % width;
      const int64_t slot = slots[n];
      if (slot >= 0)
        v_cache[slot * width + j] = from_float<CacheT>(to_float(v[n * s.v_row_stride + j]));
    }
  }
}

template <class T, class CacheT>
void launch(const RopeKvWriteShape& s, const Tensor& q, const Tensor& k, const Tensor& v,
            const Tensor& positions, const Tensor& inv_freq, const Tensor& slot_mapping,
            const Tensor& q_out, const Tensor& k_out, const Tensor& k_cache,
            const Tensor& v_cache) {
  const int64_t total = s.N * (s.H + s.Hkv) * (s.D / 2) + s.N * s.Hkv * s.D;
  launch_dependent("rope_kv_write_kernel", rope_kv_write_kernel<T, CacheT>,
                   dim3(grid_for(total, kThreads)), dim3(kThreads), 0, stream_of(k_cache), s,
                   ptr<const T>(q), ptr<const T>(k), ptr<const T>(v), ptr<const int32_t>(positions),
                   ptr<const float>(inv_freq), ptr<const int32_t>(slot_mapping), ptr<T>(q_out),
                   ptr<T>(k_out), ptr<CacheT>(k_cache), ptr<CacheT>(v_cache));
}

}  // namespace

void rope_kv_write_cuda(const RopeKvWriteShape& s, const Tensor& q, const Tensor& k,
                        const Tensor& v, const Tensor& positions, const Tensor& inv_freq,
                        const Tensor& slot_mapping, const Tensor& q_out, const Tensor& k_out,
                        const Tensor& k_cache, const Tensor& v_cache) {
  dispatch_cuda_float(q.dtype(), "rope_kv_write", [&](auto tag) {
    using T = decltype(tag);
    // The cache dtype was checked on the host: f32 or bf16.
    if (k_cache.dtype() == DType::F32)
      launch<T, float>(s, q, k, v, positions, inv_freq, slot_mapping, q_out, k_out, k_cache,
                       v_cache);
    else
      launch<T, __nv_bfloat16>(s, q, k, v, positions, inv_freq, slot_mapping, q_out, k_out, k_cache,
                               v_cache);
  });
}

}  // namespace microllm::ops
