// CPU GEMM for GemmMode::batch_invariant: every output element is computed by the same
// instructions whatever M, N, the tile it falls in or the thread that runs it, so row r of
// an M = 1 product equals row r of an M = 64 product bit for bit.
//
// out[i, j] = Σ_k A[i, k]·Bᵀ[j, k] as a dot product of two rows contiguous in K: lane l of a
// 16-byte vector accumulates k ≡ l (mod lanes) in order, the lanes are added pairwise, then
// the K % lanes tail in order. Tiles of kRows × kCols outputs share their loads; a tile at
// the edge reads the last row / column again in place of the missing ones and discards those
// results, so edge elements go through the very same code as interior ones (no remainder
// loop whose arithmetic could differ). OpenMP splits columns; no element is shared.
// Memory: A (M, K) and Bᵀ (N, K) rows are used in place when dense along K, else packed.
// About half OpenBLAS's speed; the inference engine's CPU path pays it for invariance.
#include <algorithm>
#include <cstring>

#include "../common.h"
#include "matmul_kernels.h"

namespace microllm::ops {
namespace {

constexpr int kRows = 4;           // output rows per tile
constexpr int kCols = 2;           // output columns per tile
constexpr int64_t kRowBlock = 64;  // rows of A kept hot in cache while B streams past

// A 16-byte vector of T (GCC / Clang vector extension; plain SSE2 on x86-64).
template <class T>
struct VecOf {
  typedef T type __attribute__((vector_size(16)));
};
template <class T>
using Vec = typename VecOf<T>::type;

// out[r][c] = dot(a[r], b[c]) over K with the fixed lane order described above.
template <class T>
void dot_tile(const T* const (&a)[kRows], const T* const (&b)[kCols], int64_t K,
              T (&out)[kRows][kCols]) {
  constexpr int kLanes = static_cast<int>(16 / sizeof(T));
  Vec<T> acc[kRows][kCols];
  for (auto& row : acc)
    for (auto& v : row) v = Vec<T>{};
  int64_t k = 0;
  for (; k + kLanes <= K; k += kLanes) {
    Vec<T> av[kRows], bv[kCols];
    for (int r = 0; r < kRows; ++r) std::memcpy(&av[r], a[r] + k, sizeof(Vec<T>));
    for (int c = 0; c < kCols; ++c) std::memcpy(&bv[c], b[c] + k, sizeof(Vec<T>));
    for (int r = 0; r < kRows; ++r)
      for (int c = 0; c < kCols; ++c) acc[r][c] += av[r] * bv[c];
  }
  for (int r = 0; r < kRows; ++r)
    for (int c = 0; c < kCols; ++c) {
      T lanes[kLanes];
      std::memcpy(lanes, &acc[r][c], sizeof(lanes));
      for (int width = kLanes / 2; width > 0; width /= 2)
        for (int l = 0; l < width; ++l) lanes[l] = lanes[l] + lanes[l + width];
      T sum = lanes[0];
      for (int64_t t = k; t < K; ++t) sum += a[r][t] * b[c][t];
      out[r][c] = sum;
    }
}

// c (M, N) dense = a (M, K) rows at stride lda · bt (N, K) rows at stride ldb, transposed.
template <class T>
void gemm_rows(const T* a, int64_t lda, const T* bt, int64_t ldb, T* c, int64_t M, int64_t N,
               int64_t K) {
  const int64_t col_tiles = (N + kCols - 1) / kCols;
  for (int64_t i0 = 0; i0 < M; i0 += kRowBlock) {
    const int64_t i1 = std::min(M, i0 + kRowBlock);
#pragma omp parallel for schedule(static)
    for (int64_t jt = 0; jt < col_tiles; ++jt) {
      const int64_t j0 = jt * kCols;
      const T* b_rows[kCols];
      for (int cc = 0; cc < kCols; ++cc) b_rows[cc] = bt + std::min(j0 + cc, N - 1) * ldb;
      for (int64_t i = i0; i < i1; i += kRows) {
        const T* a_rows[kRows];
        for (int r = 0; r < kRows; ++r) a_rows[r] = a + std::min(i + r, M - 1) * lda;
        T out[kRows][kCols];
        dot_tile<T>(a_rows, b_rows, K, out);
        for (int r = 0; r < kRows && i + r < M; ++r)
          for (int cc = 0; cc < kCols && j0 + cc < N; ++cc) c[(i + r) * N + j0 + cc] = out[r][cc];
      }
    }
  }
}

// A 2-D view dense along its last dimension (a copy when it is not).
Tensor rows_dense_along_k(Tensor m) {
  if (m.size(1) > 1 && m.stride(1) != 1) return m.contiguous();
  return m;
}

}  // namespace

void gemm_cpu_batch_invariant(const GemmProblem& p, const Tensor& a, const Tensor& b,
                              const Tensor& out) {
  detail::dispatch_float(out.dtype(), [&](auto tag) {
    using T = decltype(tag);
    for (int64_t i = 0; i < p.batch; ++i) {
      const Tensor a_i = a.narrow(0, a.size(0) == 1 ? 0 : i, 1).squeeze(0);  // stored (rows, cols)
      const Tensor b_i = b.narrow(0, b.size(0) == 1 ? 0 : i, 1).squeeze(0);
      const Tensor lhs = rows_dense_along_k(p.trans_a ? a_i.transpose(0, 1) : a_i);  // (M, K)
      const Tensor rhs = rows_dense_along_k(p.trans_b ? b_i : b_i.transpose(0, 1));  // (N, K)
      gemm_rows<T>(lhs.template data<T>(), lhs.stride(0), rhs.template data<T>(), rhs.stride(0),
                   out.data<T>() + i * p.m * p.n, p.m, p.n, p.k);
    }
  });
}

}  // namespace microllm::ops
