// CUDA KV write: one block per new token row copies its keys and values into the row's cache
// slot, converting to the cache dtype (round to nearest even, as the CPU reference does).
// Layout: k, v (N, Hkv, D) with dense (Hkv, D) rows at k_row_stride / v_row_stride; caches
// (NB, BS, Hkv, D) dense, slot s at element s·Hkv·D. A row whose slot is −1 (padding) exits.
// Each cache element has one writer (distinct slots), so there is nothing to order.
#include "../cuda_common.cuh"
#include "kv_write_kernels.h"

namespace microllm::ops {
namespace {

using namespace cuda_detail;

constexpr int kThreads = 128;  // per block: a (Hkv, D) row is 128..2048 elements

template <class T, class CacheT>
__global__ void kv_write_kernel(KvWriteShape s, const T* k, const T* v, const int32_t* slots,
                                CacheT* k_cache, CacheT* v_cache) {
  const int64_t n = blockIdx.x;  // the token row
  const int64_t slot = slots[n];
  if (slot < 0) return;  // padding row: writes nothing
  const int64_t row = s.Hkv * s.D;
  const T* k_row = k + n * s.k_row_stride;  // (Hkv, D)
  const T* v_row = v + n * s.v_row_stride;  // (Hkv, D)
  CacheT* k_slot = k_cache + slot * row;    // (Hkv, D)
  CacheT* v_slot = v_cache + slot * row;    // (Hkv, D)
  for (int64_t e = threadIdx.x; e < row; e += kThreads) {
    k_slot[e] = from_float<CacheT>(to_float(k_row[e]));
    v_slot[e] = from_float<CacheT>(to_float(v_row[e]));
  }
}

}  // namespace

void kv_write_cuda(const KvWriteShape& s, const Tensor& k, const Tensor& v,
                   const Tensor& slot_mapping, const Tensor& k_cache, const Tensor& v_cache) {
  MICROLLM_CHECK(s.N <= INT32_MAX, "kv_write", "too many rows for the CUDA grid: N = ", s.N);
  dispatch_cuda_float(k.dtype(), "kv_write", [&](auto tag) {
    using T = decltype(tag);
    const auto launch = [&](auto cache_tag) {
      using CacheT = decltype(cache_tag);
      kv_write_kernel<T, CacheT><<<static_cast<unsigned>(s.N), kThreads, 0, stream_of(k_cache)>>>(
          s, ptr<const T>(k), ptr<const T>(v), ptr<const int32_t>(slot_mapping),
          ptr<CacheT>(k_cache), ptr<CacheT>(v_cache));
      CUDA_CHECK_LAUNCH("kv_write_kernel");
    };
    // The cache dtype was checked on the host: f32 or bf16.
    if (k_cache.dtype() == DType::F32)
      launch(float{});
    else
      launch(__nv_bfloat16{});
  });
}

}  // namespace microllm::ops
