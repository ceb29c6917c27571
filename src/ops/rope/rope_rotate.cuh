// The rotation of one RoPE pair, shared by rope_kernel (rope_cuda.cu), the fused
// rope_kv_write kernel (kv_write/rope_kv_write_cuda.cu) and the decode GEMV's rope_kv_write
// epilogue (matmul/gemv_cuda.cu), so all give the same bits.
#pragma once

namespace microllm::ops::cuda_detail {

// (x1, x2) = (x[i], x[i + D/2]) turned by `angle` = float(position) · inv_freq[i] (−angle when
// `inverse`): y1 = x1·cos − x2·sin, y2 = x2·cos + x1·sin, in F32. sincosf is the accurate
// version (not __sinf/__cosf): with positions in the tens of thousands the angles are large
// and the fast intrinsics lose several digits. A kernel turning several heads by one angle
// takes rope_sin_cos once and rope_turn per head: the same bits.
__device__ __forceinline__ void rope_sin_cos(float angle, bool inverse, float& s, float& c) {
  sincosf(angle, &s, &c);
  if (inverse) s = -s;
}
__device__ __forceinline__ void rope_turn(float x1, float x2, float s, float c, float& y1,
                                          float& y2) {
  y1 = x1 * c - x2 * s;
  y2 = x2 * c + x1 * s;
}
__device__ __forceinline__ void rope_rotate(float x1, float x2, float angle, bool inverse,
                                            float& y1, float& y2) {
  float s, c;
  rope_sin_cos(angle, inverse, s, c);
  rope_turn(x1, x2, s, c, y1, y2);
}

}  // namespace microllm::ops::cuda_detail
