// Tensor-core building blocks of the flash attention kernels (sm_80+ warp-level MMA).
//
// One warp computes D(16×8, F32) += A(16×16) · B(16×8) with mma.sync.m16n8k16 on BF16 or
// F16 operands. In a warp, lane = 4·g + c (g = lane / 4 the group, c = lane % 4):
//   A registers a[0..3] (two 16-bit values each): (row g, cols 2c, 2c+1), (row g+8, same
//     cols), (row g, cols 2c+8, 2c+9), (row g+8, cols 2c+8, 2c+9);
//   B registers b[0..1]: (rows k = 2c, 2c+1, col n = g), (rows k = 2c+8, 2c+9, col g);
//   accumulator d[0..3]: (row g, cols 2c, 2c+1), (row g+8, cols 2c, 2c+1).
// An accumulator tile pair laid side by side (cols 0..7 and 8..15) is, packed to 16 bits,
// exactly an A operand over k = 0..15: that is how P = softmax(S) feeds P·V without a trip
// through shared memory.
// Reference: PTX ISA, "Matrix fragments for mma.m16n8k16"; Dao 2023 (FlashAttention-2) for
// the algorithm that uses them.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "../../cuda/async_copy.cuh"

namespace microllm::ops::flash {

// d += a · b on a 16×8×16 tile; T is __nv_bfloat16 or __half.
template <class T>
__device__ __forceinline__ void mma_16816(float (&d)[4], const uint32_t (&a)[4],
                                          const uint32_t (&b)[2]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
#else
  __trap();  // the build targets sm_90a; older architectures never launch these kernels
#endif
}

// Two F32 values rounded to T and packed into one register, lo in the low half.
template <class T>
__device__ __forceinline__ uint32_t pack_pair(float lo, float hi) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
  } else {
    const __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
  }
}

// Four 8×8 matrices of 16-bit values from shared memory, lane l giving the address of one
// 8-element row (16-byte aligned): lanes 8i..8i+7 the rows of matrix i. Each lane receives
// (row l / 4, cols 2(l % 4), +1) of every matrix (transposed: (rows 2(l % 4), +1; col l / 4)).
__device__ __forceinline__ void load_matrices(uint32_t (&r)[4], const void* row_address) {
  const unsigned address = static_cast<unsigned>(__cvta_generic_to_shared(row_address));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
}
__device__ __forceinline__ void load_matrices_transposed(uint32_t (&r)[4],
                                                         const void* row_address) {
  const unsigned address = static_cast<unsigned>(__cvta_generic_to_shared(row_address));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
}

// The A operand of rows [row0, row0 + 16) × cols [col0, col0 + 16) of a row-major shared
// tile with `stride` elements per row: lanes 0..15 point at rows 0..15 (matrices 0 and 1:
// cols 0..7), lanes 16..31 at the same rows, cols 8..15 (matrices 2 and 3).
template <class T>
__device__ __forceinline__ void load_a(uint32_t (&a)[4], const T* tile, int stride, int row0,
                                       int col0, int lane) {
  // Lane groups 0..3 give matrices (rows 0..7, cols 0..7), (8..15, 0..7), (0..7, 8..15),
  // (8..15, 8..15): the order of a[0..3].
  load_matrices(a, tile + (row0 + (lane & 15)) * stride + col0 + (lane >> 4) * 8);
}

// The A operand of rows [row0, row0 + 16) × cols [col0, col0 + 16) of the transpose of a
// row-major shared tile (A[r][k] = m[col0 + k][row0 + r], as dS is read from its stored dSᵀ):
// the matrices of a[0..3] are (r 0..7, k 0..7), (r 8..15, k 0..7), (r 0..7, k 8..15),
// (r 8..15, k 8..15), each stored as 8 rows of m read transposed; lane l points at row
// col0 + (l & 7) + 8·(l / 16) of m, col row0 + 8·((l / 8) & 1).
template <class T>
__device__ __forceinline__ void load_a_transposed(uint32_t (&a)[4], const T* tile, int stride,
                                                  int row0, int col0, int lane) {
  load_matrices_transposed(
      a, tile + (col0 + (lane & 7) + ((lane >> 4) << 3)) * stride + row0 + ((lane >> 3) & 1) * 8);
}

// B operands of two 8-column tiles, n-tiles 2p and 2p + 1, for B[k][n] = m[n0 + n][k0 + k]
// (the rows of m are the n index, as K's rows are in Q·Kᵀ): b[0] for n-tile 2p, b[1] for
// 2p + 1. Lane l points at row n0 + (l & 7) + 8·(l / 16), col k0 + 8·((l / 8) & 1).
template <class T>
__device__ __forceinline__ void load_b_pair(uint32_t (&b)[2][2], const T* tile, int stride, int n0,
                                            int k0, int lane) {
  uint32_t r[4];
  load_matrices(
      r, tile + (n0 + (lane & 7) + ((lane >> 4) << 3)) * stride + k0 + ((lane >> 3) & 1) * 8);
  b[0][0] = r[0];
  b[0][1] = r[1];
  b[1][0] = r[2];
  b[1][1] = r[3];
}

// B operands of two 8-column tiles for B[k][n] = m[k0 + k][n0 + n] (the rows of m are the
// k index, as V's rows are in P·V): lane l points at row k0 + (l & 15), col n0 + 8·(l / 16).
template <class T>
__device__ __forceinline__ void load_b_pair_transposed(uint32_t (&b)[2][2], const T* tile,
                                                       int stride, int k0, int n0, int lane) {
  uint32_t r[4];
  load_matrices_transposed(r, tile + (k0 + (lane & 15)) * stride + n0 + (lane >> 4) * 8);
  b[0][0] = r[0];
  b[0][1] = r[1];
  b[1][0] = r[2];
  b[1][1] = r[3];
}

// 16-byte cp.async copies (src/cuda/async_copy.cuh).
using microllm::cuda::commit_async;
using microllm::cuda::copy16_async;
using microllm::cuda::wait_async;

// One step of a double-buffered stream of tiles: starts loading tile i + 1 into the other
// stage with load(i + 1, stage) (cp.async copies, committed here as one group), then waits
// until tile i, committed earlier, is in shared memory for every thread of the block.
template <class Load>
__device__ __forceinline__ void next_tile(int64_t i, int64_t tiles, Load&& load) {
  if (i + 1 < tiles) {
    load(i + 1, static_cast<int>((i + 1) & 1));
    commit_async();
    wait_async<1>();
  } else {
    wait_async<0>();
  }
  __syncthreads();
}

// The tile geometry shared by the kernels: 64-row tiles of queries or keys, 4 warps of 16
// rows, shared rows padded by 8 elements (16 bytes) so that the fragment loads of the 8
// groups of a warp fall into distinct banks.
constexpr int kTileRows = 64;
constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
template <int D>
constexpr int kStride = D + 8;  // elements per shared row
template <int D, int kRows = kTileRows>
constexpr int kTileElements = kRows* kStride<D>;

// acc[nt] += A · rows [k0, k0 + 16) of a shared (·, D + 8) tile, over its D columns: a warp's
// 16 × 16 A fragment (16 of its rows against 16 of the tile's rows) times those rows, as P·V
// and dS·K use it.
template <int D, class T>
__device__ __forceinline__ void fragment_times_rows(float (&acc)[D / 8][4], const uint32_t (&a)[4],
                                                    const T* tile, int k0, int lane) {
#pragma unroll
  for (int pair = 0; pair < D / 16; ++pair) {
    uint32_t b[2][2];
    load_b_pair_transposed(b, tile, kStride<D>, k0, pair * 16, lane);
    mma_16816<T>(acc[2 * pair], a, b[0]);
    mma_16816<T>(acc[2 * pair + 1], a, b[1]);
  }
}

// Starts the copy of rows [row0, row0 + kRows) of a dense (rows, D) matrix into a shared
// tile; rows at or past `rows` become zeros. Called by all kThreads threads; commits nothing.
// Each thread copies the same kPerThread 16-byte pieces of every tile (fixed trip count,
// unrolled), with 32-bit offsets from the tile's first row and one 64-bit test per tile.
template <class T, int D, int kRows = kTileRows>
__device__ __forceinline__ void load_tile_async(T* tile, const T* matrix, int64_t row0,
                                                int64_t rows) {
  constexpr int kVectorsPerRow = D * static_cast<int>(sizeof(T)) / 16;
  constexpr int kPerThread = kRows * kVectorsPerRow / kThreads;
  static_assert(kRows * kVectorsPerRow % kThreads == 0, "whole vectors per thread");
  const int64_t left = rows - row0;  // rows of the tile inside the matrix, clamped below
  const int valid_rows = left >= kRows ? kRows : (left > 0 ? static_cast<int>(left) : 0);
  const T* first = matrix + row0 * D;
#pragma unroll
  for (int n = 0; n < kPerThread; ++n) {
    const int i = threadIdx.x + n * kThreads;
    const int r = i / kVectorsPerRow, v = i % kVectorsPerRow;
    const bool valid = r < valid_rows;
    const T* source = valid ? first + r * D + v * (16 / sizeof(T)) : matrix;
    copy16_async(tile + r * kStride<D> + v * (16 / sizeof(T)), source, valid);
  }
}

// Starts the copy of a kRows × kCols block at `block` (row pitch `pitch` elements, every row
// inside the matrix and 16-byte aligned) into a shared tile with kCols + 8 elements per row.
// Called by all kThreads threads; commits nothing.
template <class T, int kCols, int kRows = kTileRows>
__device__ __forceinline__ void load_block_async(T* tile, const T* block, int64_t pitch) {
  constexpr int kVectorsPerRow = kCols * static_cast<int>(sizeof(T)) / 16;
  constexpr int kPerThread = kRows * kVectorsPerRow / kThreads;
  static_assert(kRows * kVectorsPerRow % kThreads == 0, "whole vectors per thread");
#pragma unroll
  for (int n = 0; n < kPerThread; ++n) {
    const int i = threadIdx.x + n * kThreads;
    const int r = i / kVectorsPerRow, v = i % kVectorsPerRow;
    copy16_async(tile + r * kStride<kCols> + v * (16 / sizeof(T)),
                 block + r * pitch + v * (16 / sizeof(T)), true);
  }
}

}  // namespace microllm::ops::flash
