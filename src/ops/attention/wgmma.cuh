// Hopper helpers of the wgmma attention kernels (and the kernel lab's wgmma programs):
// warpgroup MMA (wgmma) wrappers, their fences, shared-memory matrix descriptors,
// 128-byte-swizzled tiles filled by cp.async, and BF16 packing. Device code only; sm_90a.
//
// Shared-memory tiles: rows of D BF16 elements split into 64-column atoms (128 bytes a row);
// atom a of a tile of R rows is R × 128 bytes at a · R · 128, and inside it the 16-byte chunk
// c of row r sits at chunk c ^ (r % 8) (the 128-byte swizzle a descriptor names). A tile
// starts 1,024-byte aligned. Descriptor fields (PTX ISA, "Matrix Descriptor" of the
// asynchronous warpgroup MMA): start address >> 4 in bits 0–13, leading byte offset >> 4 in
// 16–29, stride byte offset >> 4 in 32–45, swizzle mode in 62–63 (1: 128 bytes).
//   - K-major operand (rows along M or N, the 16 k of a step along a row): 8-row groups
//     1,024 bytes apart (stride offset; the leading offset is unused); a k16 step starts
//     32 bytes further in the row, the next atom's k at the next atom.
//   - MN-major operand (rows along K, M or N along a row): 8-row (k) groups 1,024 bytes apart
//     (stride offset), the second 64-column atom (M or N 64…127) at the leading offset; a k16
//     step starts 16 rows (2,048 bytes) further.
// Accumulator (64, N) of a warpgroup: warp w holds rows 16w…16w+15; in it lane (g = lane / 4,
// c = lane % 4) holds element e at row g + 8·((e % 4) / 2), column 8·(e / 4) + 2c + e % 2.
// An A operand from registers is each warp's 16 rows as the m16n8k16 A fragment, so the
// accumulator's elements 8kk…8kk+7 (as BF16 pairs) are the A fragment of columns 16kk…16kk+15.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "../../cuda/async_copy.cuh"

namespace microllm::ops::wgmma {

constexpr int kAtomCols = 64;  // BF16 columns of a 128-byte tile row

// d (64, 64) (+)= A (64, 16) · B (16, 64), both in shared memory (descriptors); kTransA /
// kTransB: 0 K-major, 1 MN-major. accumulate = 0 overwrites d.
template <int kTransA, int kTransB>
__device__ __forceinline__ void wgmma_ss_n64(float (&d)[32], uint64_t a, uint64_t b,
                                             int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
      "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
      "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, "
      "%32, %33, p, 1, 1, %35, %36;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
        "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
        "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
        "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "l"(a), "l"(b), "r"(accumulate), "n"(kTransA), "n"(kTransB));
}

// d (64, 64) (+)= A (64, 16) · B (16, 64); A from registers (each warp's 16 rows as the
// m16n8k16 A fragment), B in shared memory; kTransB: 0 K-major, 1 MN-major.
template <int kTransB>
__device__ __forceinline__ void wgmma_rs_n64(float (&d)[32], const uint32_t (&a)[4], uint64_t b,
                                             int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
      "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
      "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, "
      "{%32,%33,%34,%35}, %36, p, 1, 1, %38;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
        "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
        "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
        "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(accumulate), "n"(kTransB));
}

// d (64, 128) (+)= A (64, 16) · B (16, 128), both in shared memory (descriptors); kTransA /
// kTransB: 0 K-major, 1 MN-major. accumulate = 0 overwrites d.
template <int kTransA, int kTransB>
__device__ __forceinline__ void wgmma_ss_n128(float (&d)[64], uint64_t a, uint64_t b,
                                              int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
      "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
      "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,"
      "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,"
      "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, "
      "%64, %65, p, 1, 1, %67, %68;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
        "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
        "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
        "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]),
        "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),
        "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),
        "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]),
        "+f"(d[63])
      : "l"(a), "l"(b), "r"(accumulate), "n"(kTransA), "n"(kTransB));
}

// d (64, 128) (+)= A (64, 16) · B (16, 128); A from registers (each warp's 16 rows as the
// m16n8k16 A fragment), B in shared memory; kTransB: 0 K-major, 1 MN-major.
template <int kTransB>
__device__ __forceinline__ void wgmma_rs_n128(float (&d)[64], const uint32_t (&a)[4], uint64_t b,
                                              int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
      "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
      "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,"
      "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,"
      "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, "
      "{%64,%65,%66,%67}, %68, p, 1, 1, %70;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
        "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
        "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
        "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]),
        "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),
        "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),
        "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]),
        "+f"(d[63])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(accumulate), "n"(kTransB));
}

__device__ __forceinline__ void wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int kPending>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}
// Tells the compiler that the wgmma accumulators change here (they are written
// asynchronously between the issue and the wait), so no read moves above the wait.
template <int N>
__device__ __forceinline__ void fence_registers(float (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}
// Writes of the generic proxy (st.shared, cp.async) made visible to the wgmma's reads.
__device__ __forceinline__ void fence_async_shared() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

__device__ __forceinline__ uint64_t descriptor(const void* tile, uint32_t leading_bytes,
                                               uint32_t stride_bytes) {
  const uint32_t address = static_cast<uint32_t>(__cvta_generic_to_shared(tile));
  return static_cast<uint64_t>((address & 0x3FFFF) >> 4) |
         static_cast<uint64_t>((leading_bytes >> 4) & 0x3FFF) << 16 |
         static_cast<uint64_t>((stride_bytes >> 4) & 0x3FFF) << 32 | 1ull << 62;
}

// The first 1,024-byte boundary at or after `raw` (dynamic shared memory is only 16-byte
// aligned; a swizzled tile starts on such a boundary).
__device__ __forceinline__ uint8_t* align_to_tiles(uint8_t* raw) {
  return reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(raw) + 1023) &
                                    ~static_cast<uintptr_t>(1023));
}

// Byte offset of element (row, col) in a swizzled tile of `rows` rows.
__host__ __device__ __forceinline__ uint32_t tile_offset(int row, int col, int rows) {
  const int atom = col / kAtomCols, chunk = (col % kAtomCols) / 8;
  return static_cast<uint32_t>(atom * rows * 128 + row * 128 + ((chunk ^ (row % 8)) << 4) +
                               (col % 8) * 2);
}

__device__ __forceinline__ void cp_async16(void* shared, const void* global) {
  const uint32_t address = static_cast<uint32_t>(__cvta_generic_to_shared(shared));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(address), "l"(global));
}
// Copies `bytes` (0 or 16) and fills the rest of the 16 with zeros.
__device__ __forceinline__ void cp_async16_fill(void* shared, const void* global, uint32_t bytes) {
  microllm::cuda::copy16_async(shared, global, bytes != 0);
}
using microllm::cuda::commit_async;  // the cp.async groups (src/cuda/async_copy.cuh)
using microllm::cuda::wait_async;

// Copies `rows` rows of kCols elements from global (rows `stride` elements apart) into a
// swizzled tile, 16 bytes a thread at a time, by `threads` threads.
template <int kCols>
__device__ __forceinline__ void load_tile(uint8_t* tile, const __nv_bfloat16* global, int rows,
                                          int64_t stride, int thread, int threads) {
  constexpr int kChunks = kCols / 8;  // 16-byte chunks of a row
  for (int i = thread; i < rows * kChunks; i += threads) {
    const int row = i / kChunks, col = (i % kChunks) * 8;
    cp_async16(tile + tile_offset(row, col, rows), global + row * stride + col);
  }
}

// As load_tile, for a tile whose rows from `valid` on lie past the matrix: those are zeros
// (no global read past row valid - 1).
template <int kCols>
__device__ __forceinline__ void load_tile_rows(uint8_t* tile, const __nv_bfloat16* global, int rows,
                                               int valid, int64_t stride, int thread, int threads) {
  constexpr int kChunks = kCols / 8;
  for (int i = thread; i < rows * kChunks; i += threads) {
    const int row = i / kChunks, col = (i % kChunks) * 8;
    const bool inside = row < valid;
    cp_async16_fill(tile + tile_offset(row, col, rows), global + (inside ? row * stride + col : 0),
                    inside ? 16u : 0u);
  }
}

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

}  // namespace microllm::ops::wgmma
