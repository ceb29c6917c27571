// The rotation of one RoPE pair, shared by rope_kernel (rope_cuda.cu), rope_qkv_heads
// (rope_qkv_heads_cuda.cu), the fused rope_kv_write kernel (kv_write/rope_kv_write_cuda.cu)
// and the decode GEMV's rope_kv_write epilogue (matmul/gemv_cuda.cu), so all give the same
// bits.
#pragma once

namespace microllm::ops::cuda_detail {

// (x1, x2) = (x[i], x[i + D/2]) turned by `angle` = float(position) · inv_freq[i] (−angle when
// `inverse`): y1 = x1·cos − x2·sin, y2 = x2·cos + x1·sin, in F32. sincosf is the accurate
// version (not __sinf/__cosf): with positions in the tens of thousands the angles are large
// and the fast intrinsics lose several digits. Each product and sum is rounded on its own
// (__fmul_rn, __fsub_rn, __fadd_rn, which the compiler never contracts into an FMA): left to
// it, contraction may differ from one call site to another, and the callers above must agree
// bit for bit.
__device__ __forceinline__ void rope_rotate(float x1, float x2, float angle, bool inverse,
                                            float& y1, float& y2) {
  float s, c;
  sincosf(angle, &s, &c);
  if (inverse) s = -s;
  y1 = __fsub_rn(__fmul_rn(x1, c), __fmul_rn(x2, s));
  y2 = __fadd_rn(__fmul_rn(x2, c), __fmul_rn(x1, s));
}

// R consecutive elements of a row, loaded or stored as one access (rope's runs of pairs).
template <class T, int R>
struct alignas(R * sizeof(T)) RopeRun {
  T v[R];
};

}  // namespace microllm::ops::cuda_detail
