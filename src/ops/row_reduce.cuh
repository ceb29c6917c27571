// Device helpers for kernels that process rows of the last dimension with a group of
// threads (a warp for short rows, the whole block for long ones): ownership of elements,
// 16-byte vector access, fixed-order group reductions, and the online max/sum of softmax.
// Shared by the softmax and cross-entropy kernels. Device code only.
#pragma once

#include "cuda_common.cuh"

namespace microllm::ops::cuda_detail {

// The threads sharing one row: a warp (short rows: no block-wide synchronization, several
// rows per block) or the whole block. Groups stride over the rows.
struct RowGroup {
  int lane, size;         // this thread's place in the group, the group's thread count
  int64_t first, stride;  // the group's first row, the distance to its next
};

template <bool kWarpPerRow>
__device__ __forceinline__ RowGroup row_group() {
  if (kWarpPerRow) {
    const int64_t per_block = blockDim.x / kWarp;
    return {static_cast<int>(threadIdx.x % kWarp), kWarp,
            blockIdx.x * per_block + threadIdx.x / kWarp,
            static_cast<int64_t>(gridDim.x) * per_block};
  }
  return {static_cast<int>(threadIdx.x), static_cast<int>(blockDim.x), blockIdx.x, gridDim.x};
}

// Fixed-order reductions over the group; every thread of the group gets the result.
template <bool kWarpPerRow>
__device__ __forceinline__ float group_max(float v, float* scratch) {
  return kWarpPerRow ? warp_max(v) : block_max(v, scratch);
}
template <bool kWarpPerRow>
__device__ __forceinline__ float group_sum(float v, float* scratch) {
  return kWarpPerRow ? warp_sum(v) : block_sum(v, scratch);
}

// Calls f(i, a[i]) for the elements of a row of n that thread `g.lane` owns, in increasing
// i. With `vec` (row 16-byte aligned, n a multiple of kVec<T>) each load moves 16 bytes:
// these kernels are bandwidth-bound.
template <class T, class F>
__device__ __forceinline__ void for_each_owned(const T* a, int64_t n, bool vec, const RowGroup& g,
                                               F&& f) {
  if (vec) {
    const int64_t vectors = n / kVec<T>;
    for (int64_t j = g.lane; j < vectors; j += g.size) {
      const Vec16<T> va = reinterpret_cast<const Vec16<T>*>(a)[j];
#pragma unroll
      for (int e = 0; e < kVec<T>; ++e) f(j * kVec<T> + e, to_float(va.v[e]));
    }
  } else {
    for (int64_t i = g.lane; i < n; i += g.size) f(i, to_float(a[i]));
  }
}

// Calls f(i, a[i], b[i]) likewise over two rows of equal layout.
template <class T, class F>
__device__ __forceinline__ void for_each_owned(const T* a, const T* b, int64_t n, bool vec,
                                               const RowGroup& g, F&& f) {
  if (vec) {
    const int64_t vectors = n / kVec<T>;
    for (int64_t j = g.lane; j < vectors; j += g.size) {
      const Vec16<T> va = reinterpret_cast<const Vec16<T>*>(a)[j];
      const Vec16<T> vb = reinterpret_cast<const Vec16<T>*>(b)[j];
#pragma unroll
      for (int e = 0; e < kVec<T>; ++e) f(j * kVec<T> + e, to_float(va.v[e]), to_float(vb.v[e]));
    }
  } else {
    for (int64_t i = g.lane; i < n; i += g.size) f(i, to_float(a[i]), to_float(b[i]));
  }
}

// out[i] = f(i, a[i]) over the owned elements (16-byte loads and stores with `vec`).
template <class T, class F>
__device__ __forceinline__ void transform_row(const T* a, T* out, int64_t n, bool vec,
                                              const RowGroup& g, F&& f) {
  if (vec) {
    const int64_t vectors = n / kVec<T>;
    for (int64_t j = g.lane; j < vectors; j += g.size) {
      const Vec16<T> va = reinterpret_cast<const Vec16<T>*>(a)[j];
      Vec16<T> vo;
#pragma unroll
      for (int e = 0; e < kVec<T>; ++e)
        vo.v[e] = from_float<T>(f(j * kVec<T> + e, to_float(va.v[e])));
      reinterpret_cast<Vec16<T>*>(out)[j] = vo;
    }
  } else {
    for (int64_t i = g.lane; i < n; i += g.size) out[i] = from_float<T>(f(i, to_float(a[i])));
  }
}

// out[i] = f(i, a[i], b[i]) over the owned elements.
template <class T, class F>
__device__ __forceinline__ void transform_row(const T* a, const T* b, T* out, int64_t n, bool vec,
                                              const RowGroup& g, F&& f) {
  if (vec) {
    const int64_t vectors = n / kVec<T>;
    for (int64_t j = g.lane; j < vectors; j += g.size) {
      const Vec16<T> va = reinterpret_cast<const Vec16<T>*>(a)[j];
      const Vec16<T> vb = reinterpret_cast<const Vec16<T>*>(b)[j];
      Vec16<T> vo;
#pragma unroll
      for (int e = 0; e < kVec<T>; ++e)
        vo.v[e] = from_float<T>(f(j * kVec<T> + e, to_float(va.v[e]), to_float(vb.v[e])));
      reinterpret_cast<Vec16<T>*>(out)[j] = vo;
    }
  } else {
    for (int64_t i = g.lane; i < n; i += g.size)
      out[i] = from_float<T>(f(i, to_float(a[i]), to_float(b[i])));
  }
}

// One thread's running max m and s = Σ exp(x − m) over the elements it has seen.
struct OnlineSum {
  float m = -INFINITY;
  float s = 0.0f;
};

__device__ __forceinline__ void online_add(OnlineSum& a, float x) {
  if (x > a.m) {
    a.s = a.s * expf(a.m - x) + 1.0f;  // rescale the old sum to the new max
    a.m = x;
  } else if (x != -INFINITY) {
    a.s += expf(x - a.m);  // −inf (masked) adds nothing; NaN makes the sum NaN
  }
}

// Row max M and S = Σ exp(x − M), the same in every thread of the group.
struct RowStats {
  float max;
  float sum;
};

constexpr float kLog2e = 1.4426950408889634f;

// 2^x on the special function unit, subnormal results flushed to 0: exp(x − m) as
// 2^(x·log2 e − m·log2 e) is one FFMA and this, where expf is several instructions. That form
// rounds m·log2 e (an error of up to 2^−24·|m·log2 e| in the exponent), which a sum of many
// terms does not notice; an element compared on its own wants 2^((x − m)·log2 e), exact where
// x = m.
__device__ __forceinline__ float exp2_ftz(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// online_add over the kN elements of one 16-byte load at once: the running max moves once,
// to the largest of them, and their kN exponentials are independent of each other, so they
// overlap instead of forming a chain of dependent expf calls (the rows are bandwidth-bound
// only while the loads are not waiting for that chain). An element equal to the max adds 1,
// as online_add's new-max branch does, so a single +inf still gives s = 1. kBase2 takes
// exp2_ftz's form: one FFMA, one ex2 and one add an element while the max is finite; under a
// non-finite max the same terms as the expf form.
template <int kN, bool kBase2 = false>
__device__ __forceinline__ void online_add_many(OnlineSum& a, const float (&x)[kN]) {
  float m = a.m;
#pragma unroll
  for (int e = 0; e < kN; ++e) m = fmaxf(m, x[e]);  // NaN is skipped here, caught below
  if (m > a.m) {
    a.s = a.s == 0.0f ? 0.0f : a.s * (kBase2 ? exp2_ftz((a.m - m) * kLog2e) : expf(a.m - m));
    a.m = m;
  }
  if constexpr (kBase2) {
    float terms = 0.0f;
    if (isfinite(a.m)) {
      const float base = a.m * kLog2e;
#pragma unroll
      for (int e = 0; e < kN; ++e) terms += exp2_ftz(fmaf(x[e], kLog2e, -base));
    } else {
#pragma unroll
      for (int e = 0; e < kN; ++e)
        terms += x[e] != x[e] ? x[e] : (x[e] == a.m && a.m > 0.0f ? 1.0f : 0.0f);
    }
    a.s += terms;
    return;
  }
  if (a.m == -INFINITY) {  // every element so far masked; a NaN among them still poisons
#pragma unroll
    for (int e = 0; e < kN; ++e)
      if (x[e] != x[e]) a.s = x[e];
    return;
  }
  float terms = 0.0f;
#pragma unroll
  for (int e = 0; e < kN; ++e) terms += x[e] == a.m ? 1.0f : expf(x[e] - a.m);
  a.s += terms;
}

template <bool kWarpPerRow, class T>
__device__ __forceinline__ RowStats row_stats(const T* row, int64_t n, bool vec, const RowGroup& g,
                                              float* scratch) {
  OnlineSum a;
  if (vec) {
    const int64_t vectors = n / kVec<T>;
    for (int64_t j = g.lane; j < vectors; j += g.size) {
      const Vec16<T> v = reinterpret_cast<const Vec16<T>*>(row)[j];
      float x[kVec<T>];
#pragma unroll
      for (int e = 0; e < kVec<T>; ++e) x[e] = to_float(v.v[e]);
      online_add_many(a, x);
    }
  } else {
    for_each_owned(row, n, false, g, [&](int64_t, float x) { online_add(a, x); });
  }
  const float m = group_max<kWarpPerRow>(a.m, scratch);
  // A thread that saw nothing finite has s = 0 (or NaN, kept so NaN reaches the row).
  const float s = group_sum<kWarpPerRow>(a.s == 0.0f ? 0.0f : a.s * expf(a.m - m), scratch);
  return {m, s};
}

}  // namespace microllm::ops::cuda_detail
