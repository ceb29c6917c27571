// CUDA RMSNorm forward and backward (Zhang & Sennrich 2019; HF LlamaRMSNorm). F32/BF16/F16
// storage, F32 arithmetic; the CPU reference is rms_norm_cpu.cpp.
//
// Layout: x, y, dy, dx dense (R, C) row-major; weight, dweight (C) in x's dtype; rstd (R) F32
// (the forward may be given none: rms_norm_out saves nothing).
//   y  = weight · (x · rstd),  rstd = 1 / sqrt(mean(x²) + eps)
//   dx = rstd · (g − x̂ · mean(g · x̂)),  g = dy · weight,  x̂ = x · rstd
//   dweight = Σ_rows dy · x̂
//
// Forward: one block per row, one 16-byte group of kVec<T> consecutive elements per thread
// (up to 1,024 threads), so a decode row costs one load latency; add_rms_norm's residual add
// runs in the same pass. dx: one warp per row when the row is short (4 rows per block), one
// block per row otherwise. A thread walks its row in groups: one vector load per group when
// C and the pointers allow, else element loads with zeros past C. Both paths add in the same
// order, so the result does not depend on alignment.
//
// dweight is a column sum over all rows, done without atomics so it is deterministic:
// kernel 1 gives each block a tile of columns and a fixed chunk of rows and writes the
// chunk's column sums to an F32 scratch (chunks, C); kernel 2 adds the chunks per column in
// a fixed order and rounds once to the weight's dtype. The chunking depends only on R. For
// rows of one warp kernel 1's sums come from the dx pass itself, which holds x and dy
// already: one read of each instead of two, and the same bits (the default;
// MICROLLM_FUSED_NORM_BACKWARD=0 runs the dx kernel and kernel 1 apart).
#include <algorithm>

#include "../cuda_common.cuh"
#include "microllm/core/switch.h"
#include "rms_norm_kernels.h"

namespace microllm::ops {
namespace {

using namespace cuda_detail;

// dx: rows up to this many groups go one per warp (≤ 4 groups per lane); longer rows one per block.
constexpr int64_t kWarpRowMaxGroups = 4 * kWarp;
constexpr int kRowsPerWarpBlock = 4;
// dweight partial sums: a block covers kColThreads column groups × kRowLanes rows at a time.
constexpr int kColThreads = kWarp;
constexpr int kRowLanes = 8;
// Row chunks: at least kMinRowsPerChunk rows each (so a chunk is worth a block), at most
// kMaxChunks chunks (bounds the scratch at kMaxChunks × C floats).
constexpr int64_t kMinRowsPerChunk = 32;
constexpr int64_t kMaxChunks = 512;
// dweight final sum: a block covers kColThreads columns × kFinishLanes chunks at a time.
constexpr int kFinishLanes = 16;

// The group of kVec<T> elements of `row` starting at column c0, as floats: one 16-byte load
// on the vector path (C % kVec<T> == 0, row 16-byte aligned), else element loads, 0 past C.
template <class T>
__device__ __forceinline__ void load_group(const T* row, int64_t c0, int64_t C, bool vec,
                                           float (&out)[kVec<T>]) {
  if (vec) {
    const Vec16<T> p = *reinterpret_cast<const Vec16<T>*>(row + c0);
#pragma unroll
    for (int j = 0; j < kVec<T>; ++j) out[j] = to_float(p.v[j]);
  } else {
#pragma unroll
    for (int j = 0; j < kVec<T>; ++j) out[j] = c0 + j < C ? to_float(row[c0 + j]) : 0.0f;
  }
}

// Stores the group starting at column c0, rounding each value once to T; nothing past C.
template <class T>
__device__ __forceinline__ void store_group(T* row, int64_t c0, int64_t C, bool vec,
                                            const float (&in)[kVec<T>]) {
  if (vec) {
    Vec16<T> p;
#pragma unroll
    for (int j = 0; j < kVec<T>; ++j) p.v[j] = from_float<T>(in[j]);
    *reinterpret_cast<Vec16<T>*>(row + c0) = p;
  } else {
#pragma unroll
    for (int j = 0; j < kVec<T>; ++j)
      if (c0 + j < C) row[c0 + j] = from_float<T>(in[j]);
  }
}

// Sum over the threads that share a row: the warp (blockDim.x == 32) or the whole block
// (blockDim.y == 1). The test is uniform over the block, so every thread reaches the
// barriers inside block_sum.
__device__ __forceinline__ float row_sum(float v, float* scratch) {
  return blockDim.x == kWarp ? warp_sum(v) : block_sum(v, scratch);
}

// The group of row x starting at column c0 as floats; with a residual row, the group of
// x + residual, rounded once to T (as add_out rounds), stored to `sum`, and returned as
// stored: the norm reads what the residual stream keeps.
template <class T>
__device__ __forceinline__ void load_sum_group(const T* x, const T* residual, T* sum, int64_t c0,
                                               int64_t C, bool vec, float (&out)[kVec<T>]) {
  load_group(x, c0, C, vec, out);
  if (residual == nullptr) return;
  float r[kVec<T>];
  load_group(residual, c0, C, vec, r);
#pragma unroll
  for (int j = 0; j < kVec<T>; ++j) out[j] = to_float(from_float<T>(out[j] + r[j]));
  store_group(sum, c0, C, vec, out);
}

// y = weight · (s · rstd) for s = x, or s = x + residual (stored to sum; sum may be x or
// residual itself, each thread rewriting the elements it read). x, residual, sum, y (R, C);
// weight (C); rstd (R) or null (not saved). One block per row, blockDim.x a multiple of 32.
// A thread adds the squares of its groups in column order, then block_sum: the order
// depends on C and blockDim.x alone, which the launch derives from C (so a row's result does
// not depend on how many rows share the call). When a thread owns one group (groups ≤
// blockDim.x) it keeps the group and its weights in registers for the output pass.
template <class T>
__global__ void rms_norm_forward_kernel(const T* x, const T* residual, const T* weight, float eps,
                                        T* sum, T* y, float* rstd, int64_t rows, int64_t C,
                                        bool vec) {
  constexpr int W = kVec<T>;
  __shared__ float scratch[kWarp];
  enter_dependent_grid();  // launched as a dependent grid (decode steps)
  const int64_t groups = (C + W - 1) / W;
  const bool one_group = groups <= blockDim.x;  // uniform over the block
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* xr = x + r * C;
    const T* rr = residual != nullptr ? residual + r * C : nullptr;
    T* sr = residual != nullptr ? sum + r * C : nullptr;
    const T* src = residual != nullptr ? sr : xr;  // the row that is normalized
    float v[W], w[W];
    float sum_sq = 0.0f;
    for (int64_t g = threadIdx.x; g < groups; g += blockDim.x) {
      load_sum_group(xr, rr, sr, g * W, C, vec, v);
      if (one_group) load_group(weight, g * W, C, vec, w);
#pragma unroll
      for (int j = 0; j < W; ++j) sum_sq += v[j] * v[j];
    }
    sum_sq = block_sum(sum_sq, scratch);
    const float inv = 1.0f / sqrtf(sum_sq / static_cast<float>(C) + eps);
    if (threadIdx.x == 0 && rstd != nullptr) rstd[r] = inv;
    T* yr = y + r * C;
    if (one_group) {
      if (threadIdx.x < groups) {
#pragma unroll
        for (int j = 0; j < W; ++j) v[j] = w[j] * (v[j] * inv);
        store_group(yr, threadIdx.x * W, C, vec, v);
      }
      continue;
    }
    // Long rows: re-read the row (this thread's own writes, or L1/L2) and the weight.
    for (int64_t g = threadIdx.x; g < groups; g += blockDim.x) {
      load_group(src, g * W, C, vec, v);
      load_group(weight, g * W, C, vec, w);
#pragma unroll
      for (int j = 0; j < W; ++j) v[j] = w[j] * (v[j] * inv);
      store_group(yr, g * W, C, vec, v);
    }
  }
}

// dx of row r: dot = Σ g · x̂ over the row's threads, then dx = rstd · (g − x̂ · mean(g · x̂)),
// plus dresidual (when given) rounded as add's kernel rounds (one rounding, never contracted
// into an FMA). The threads of a row are the warp (blockDim.x == 32) or the block; a thread
// takes groups threadIdx.x, threadIdx.x + blockDim.x, …. on_group(k, x, dy) sees the k-th group
// of the thread with its x and dy values, in the second pass (the fused backward adds dweight
// there).
template <class T, class OnGroup>
__device__ __forceinline__ void norm_backward_row(const T* x, const T* weight, const float* rstd,
                                                  const T* dy, const T* dresidual, T* dx, int64_t r,
                                                  int64_t C, bool vec, float* scratch,
                                                  OnGroup&& on_group) {
  constexpr int W = kVec<T>;
  const int64_t groups = (C + W - 1) / W;
  const T* xr = x + r * C;
  const T* dyr = dy + r * C;
  const float inv = rstd[r];
  // dot = Σ g · x̂.
  float dot = 0.0f;
  for (int64_t g = threadIdx.x; g < groups; g += blockDim.x) {
    float xv[W], wv[W], dv[W];
    load_group(xr, g * W, C, vec, xv);
    load_group(weight, g * W, C, vec, wv);
    load_group(dyr, g * W, C, vec, dv);
#pragma unroll
    for (int j = 0; j < W; ++j) dot += (dv[j] * wv[j]) * (xv[j] * inv);
  }
  dot = row_sum(dot, scratch);
  const float mean_dot = dot / static_cast<float>(C);
  // dx = rstd · (g − x̂ · mean_dot); the second read hits L1/L2 as in the forward.
  T* dxr = dx + r * C;
  int k = 0;
  for (int64_t g = threadIdx.x; g < groups; g += blockDim.x, ++k) {
    float xv[W], wv[W], dv[W];
    load_group(xr, g * W, C, vec, xv);
    load_group(weight, g * W, C, vec, wv);
    load_group(dyr, g * W, C, vec, dv);
    on_group(k, xv, dv);
#pragma unroll
    for (int j = 0; j < W; ++j) xv[j] = inv * (dv[j] * wv[j] - (xv[j] * inv) * mean_dot);
    if (dresidual != nullptr) {
      load_group(dresidual + r * C, g * W, C, vec, dv);
#pragma unroll
      for (int j = 0; j < W; ++j) xv[j] = __fadd_rn(to_float(from_float<T>(xv[j])), dv[j]);
    }
    store_group(dxr, g * W, C, vec, xv);
  }
}

// x, dy, dx (R, C); weight (C); rstd (R); dresidual (R, C) or null. Same thread layout as
// the forward kernel; a row as norm_backward_row computes it.
template <class T>
__global__ void rms_norm_backward_dx_kernel(const T* x, const T* weight, const float* rstd,
                                            const T* dy, const T* dresidual, T* dx, int64_t rows,
                                            int64_t C, bool vec) {
  __shared__ float scratch[kWarp];
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.y + threadIdx.y; r < rows;
       r += static_cast<int64_t>(gridDim.x) * blockDim.y)
    norm_backward_row(x, weight, rstd, dy, dresidual, dx, r, C, vec, scratch,
                      [](int, const auto&, const auto&) {});
}

// One term of dweight's column sum: acc + dy · (x · rstd), the product and the sum rounded as
// written (the partial and fused kernels must agree bit for bit).
__device__ __forceinline__ float dweight_term(float acc, float dy, float x, float inv) {
  return __fmaf_rn(dy, __fmul_rn(x, inv), acc);
}

// The chunk's column sums of group c0 (this thread's column of lane_sums) into its row of the
// partial sums, partial_row[c0 + j] = Σ_lane lane_sums[lane][j][threadIdx.x] added in lane
// order, nothing past C.
template <int W>
__device__ __forceinline__ void store_chunk_sums(
    const float (&lane_sums)[kRowLanes][W][kColThreads], int64_t c0, int64_t C,
    float* partial_row) {
#pragma unroll
  for (int j = 0; j < W; ++j) {
    float s = 0.0f;
#pragma unroll
    for (int lane = 0; lane < kRowLanes; ++lane) s += lane_sums[lane][j][threadIdx.x];
    if (c0 + j < C) partial_row[c0 + j] = s;
  }
}

// partial (chunks, C) F32 ← Σ over the rows of each chunk of dy · x · rstd.
// blockDim (kColThreads, kRowLanes); block b covers column tile b % col_tiles (kColThreads
// groups) and row chunk b / col_tiles. Row lane y adds rows y, y + kRowLanes, … of the
// chunk; the lanes are then added in order 0..kRowLanes−1.
template <class T>
__global__ void rms_norm_dweight_partial_kernel(const T* x, const T* dy, const float* rstd,
                                                float* partial, int64_t rows, int64_t C,
                                                int64_t rows_per_chunk, int64_t col_tiles,
                                                bool vec) {
  constexpr int W = kVec<T>;
  // [lane][j][column group]: consecutive threads touch consecutive banks.
  __shared__ float lane_sums[kRowLanes][W][kColThreads];
  const int64_t groups = (C + W - 1) / W;
  const int64_t tile = blockIdx.x % col_tiles, chunk = blockIdx.x / col_tiles;
  const int64_t g = tile * kColThreads + threadIdx.x;  // this thread's column group
  const int64_t c0 = g * W;
  const int64_t row_begin = chunk * rows_per_chunk;
  const int64_t row_end = min(rows, row_begin + rows_per_chunk);
  float acc[W];
#pragma unroll
  for (int j = 0; j < W; ++j) acc[j] = 0.0f;
  if (g < groups) {
    for (int64_t r = row_begin + threadIdx.y; r < row_end; r += kRowLanes) {
      const float inv = rstd[r];
      float xv[W], dv[W];
      load_group(x + r * C, c0, C, vec, xv);
      load_group(dy + r * C, c0, C, vec, dv);
#pragma unroll
      for (int j = 0; j < W; ++j) acc[j] = dweight_term(acc[j], dv[j], xv[j], inv);
    }
  }
#pragma unroll
  for (int j = 0; j < W; ++j) lane_sums[threadIdx.y][j][threadIdx.x] = acc[j];
  __syncthreads();
  if (threadIdx.y == 0 && g < groups) store_chunk_sums(lane_sums, c0, C, partial + chunk * C);
}

// dx and dweight's partial sums in one pass over x and dy, for rows of at most
// kWarpRowMaxGroups groups: block b takes row chunk b (rows_per_chunk rows, as the partial
// kernel's chunks), blockDim (kWarp, kRowLanes); warp y computes dx of rows y, y + kRowLanes, …
// of the chunk as rms_norm_backward_dx_kernel's warps do, and lane l adds dy · x̂ of its
// groups l, l + 32, … into registers (the partial kernel's thread (l, y) of column tile k adds
// the same terms in the same order); then the warps' sums are added in order 0..kRowLanes−1
// per column tile. dx and partial carry the bits of the two separate kernels.
template <class T>
__global__ void rms_norm_backward_fused_kernel(const T* x, const T* weight, const float* rstd,
                                               const T* dy, const T* dresidual, T* dx,
                                               float* partial, int64_t rows, int64_t C,
                                               int64_t rows_per_chunk, bool vec) {
  constexpr int W = kVec<T>;
  constexpr int kTiles = kWarpRowMaxGroups / kColThreads;  // groups a lane may own
  __shared__ float lane_sums[kRowLanes][W][kColThreads];
  const int64_t groups = (C + W - 1) / W;
  const int64_t chunk = blockIdx.x;
  const int64_t row_begin = chunk * rows_per_chunk;
  const int64_t row_end = min(rows, row_begin + rows_per_chunk);
  float acc[kTiles][W];
#pragma unroll
  for (int k = 0; k < kTiles; ++k)
#pragma unroll
    for (int j = 0; j < W; ++j) acc[k][j] = 0.0f;
  for (int64_t r = row_begin + threadIdx.y; r < row_end; r += kRowLanes) {
    const float inv = rstd[r];
    norm_backward_row(x, weight, rstd, dy, dresidual, dx, r, C, vec, nullptr,
                      [&](int k, const float(&xv)[W], const float(&dv)[W]) {
#pragma unroll
                        for (int t = 0; t < kTiles; ++t)  // a constant index keeps acc in registers
                          if (t == k)
#pragma unroll
                            for (int j = 0; j < W; ++j)
                              acc[t][j] = dweight_term(acc[t][j], dv[j], xv[j], inv);
                      });
  }
#pragma unroll
  for (int k = 0; k < kTiles; ++k) {
    if (k * kColThreads >= groups) break;  // uniform over the block
#pragma unroll
    for (int j = 0; j < W; ++j) lane_sums[threadIdx.y][j][threadIdx.x] = acc[k][j];
    __syncthreads();
    const int64_t g = k * kColThreads + threadIdx.x;
    if (threadIdx.y == 0 && g < groups) store_chunk_sums(lane_sums, g * W, C, partial + chunk * C);
    __syncthreads();
  }
}

// dweight[c] = Σ_k partial[k, c] over the chunks k, in a fixed order, rounded once to T.
// blockDim (kColThreads, kFinishLanes); block b covers columns b·kColThreads… . Lane y adds
// chunks y, y + kFinishLanes, …; the lanes are then added in order. With no chunks (R = 0)
// dweight is 0, as on the CPU.
template <class T>
__global__ void rms_norm_dweight_finish_kernel(const float* partial, int64_t num_chunks, int64_t C,
                                               T* dweight) {
  __shared__ float lane_sums[kFinishLanes][kColThreads];
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kColThreads + threadIdx.x;
  float acc = 0.0f;
  if (c < C)
    for (int64_t k = threadIdx.y; k < num_chunks; k += kFinishLanes) acc += partial[k * C + c];
  lane_sums[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    float s = 0.0f;
#pragma unroll
    for (int lane = 0; lane < kFinishLanes; ++lane) s += lane_sums[lane][threadIdx.x];
    dweight[c] = from_float<T>(s);
  }
}

// Launch shape of the dx kernel for rows of `groups` groups.
struct RowLaunch {
  dim3 block;
  unsigned grid;
};

RowLaunch row_launch(int64_t rows, int64_t groups) {
  if (groups <= kWarpRowMaxGroups)
    return {dim3(kWarp, kRowsPerWarpBlock), grid_for(rows, kRowsPerWarpBlock)};
  // About 4 groups per thread, a multiple of 32 threads in [64, 1024]: more threads for long
  // rows so a single row (decode) still spreads over many warps.
  const int64_t threads =
      std::clamp<int64_t>(ceil_div(ceil_div(groups, 4), kWarp) * kWarp, 2 * kWarp, 1024);
  return {dim3(static_cast<unsigned>(threads), 1), grid_for(rows, 1)};
}

// partial (num_chunks, C) ← the chunks' column sums of dy · x̂ (rms_norm_dweight_partial_kernel).
template <class T>
void launch_dweight_partial(const Tensor& x, const Tensor& dy, const Tensor& rstd,
                            const Tensor& partial, int64_t rows, int64_t C, int64_t rows_per_chunk,
                            int64_t num_chunks, cudaStream_t stream) {
  if (num_chunks == 0) return;
  const bool vec = C % kVec<T> == 0 && aligned16({x.raw_data(), dy.raw_data()});
  const int64_t col_tiles = ceil_div(ceil_div(C, kVec<T>), kColThreads);
  rms_norm_dweight_partial_kernel<T>
      <<<static_cast<unsigned>(col_tiles * num_chunks), dim3(kColThreads, kRowLanes), 0, stream>>>(
          ptr<const T>(x), ptr<const T>(dy), ptr<const float>(rstd), ptr<float>(partial), rows, C,
          rows_per_chunk, col_tiles, vec);
  CUDA_CHECK_LAUNCH("rms_norm_dweight_partial_kernel");
}

void launch_norm_forward(const Tensor& x, const Tensor& residual, const Tensor& weight, double eps,
                         const Tensor& sum, const Tensor& y, const Tensor& rstd) {
  const int64_t C = x.size(-1), rows = x.numel() / C;
  if (rows == 0) return;
  dispatch_cuda_float(x.dtype(), "rms_norm", [&](auto tag) {
    using T = decltype(tag);
    const bool add = residual.defined();
    bool vec = C % kVec<T> == 0 && aligned16({x.raw_data(), weight.raw_data(), y.raw_data()});
    if (add) vec = vec && aligned16({residual.raw_data(), sum.raw_data()});
    launch_dependent("rms_norm_forward_kernel", rms_norm_forward_kernel<T>, dim3(grid_for(rows, 1)),
                     dim3(static_cast<unsigned>(rms_norm_forward_threads(ceil_div(C, kVec<T>)))), 0,
                     stream_of(x), ptr<const T>(x), add ? ptr<const T>(residual) : nullptr,
                     ptr<const T>(weight), static_cast<float>(eps), add ? ptr<T>(sum) : nullptr,
                     ptr<T>(y), rstd.defined() ? ptr<float>(rstd) : nullptr, rows, C, vec);
  });
}

}  // namespace

void rms_norm_forward_cuda(const Tensor& x, const Tensor& weight, double eps, const Tensor& y,
                           const Tensor& rstd) {
  launch_norm_forward(x, Tensor(), weight, eps, Tensor(), y, rstd);
}

void add_rms_norm_forward_cuda(const Tensor& x, const Tensor& residual, const Tensor& weight,
                               double eps, const Tensor& sum, const Tensor& y, const Tensor& rstd) {
  launch_norm_forward(x, residual, weight, eps, sum, y, rstd);
}

void rms_norm_backward_cuda(const Tensor& x, const Tensor& weight, const Tensor& rstd,
                            const Tensor& dy, const Tensor& dresidual, const Tensor& dx,
                            const Tensor& dweight) {
  const int64_t C = x.size(-1), rows = x.numel() / C;
  const cudaStream_t stream = stream_of(x);
  dispatch_cuda_float(x.dtype(), "rms_norm", [&](auto tag) {
    using T = decltype(tag);
    const int64_t groups = ceil_div(C, kVec<T>);
    const bool with_residual = dresidual.defined();
    const bool dx_vec =
        C % kVec<T> == 0 &&
        aligned16({x.raw_data(), weight.raw_data(), dy.raw_data(), dx.raw_data()}) &&
        (!with_residual || aligned16({dresidual.raw_data()}));
    // dweight: per-chunk column sums, then the chunks added per column.
    const int64_t rows_per_chunk = std::max(kMinRowsPerChunk, ceil_div(rows, kMaxChunks));
    const int64_t num_chunks = ceil_div(rows, rows_per_chunk);
    Tensor
        partial;  // (num_chunks, C) F32; stream-ordered, so freeing it after the launches is safe
    if (num_chunks > 0) partial = Tensor::empty({num_chunks, C}, DType::F32, x.device());
    // dx with the partial sums in the same pass (rows of one warp; MICROLLM_FUSED_NORM_BACKWARD=0
    // turns it off): the bits of the two kernels below.
    if (num_chunks > 0 && groups <= kWarpRowMaxGroups &&
        !switch_off("MICROLLM_FUSED_NORM_BACKWARD")) {
      rms_norm_backward_fused_kernel<T>
          <<<static_cast<unsigned>(num_chunks), dim3(kWarp, kRowLanes), 0, stream>>>(
              ptr<const T>(x), ptr<const T>(weight), ptr<const float>(rstd), ptr<const T>(dy),
              with_residual ? ptr<const T>(dresidual) : nullptr, ptr<T>(dx), ptr<float>(partial),
              rows, C, rows_per_chunk, dx_vec);
      CUDA_CHECK_LAUNCH("rms_norm_backward_fused_kernel");
    } else {
      // dx, row by row.
      if (rows > 0) {
        const RowLaunch launch = row_launch(rows, groups);
        rms_norm_backward_dx_kernel<T><<<launch.grid, launch.block, 0, stream>>>(
            ptr<const T>(x), ptr<const T>(weight), ptr<const float>(rstd), ptr<const T>(dy),
            with_residual ? ptr<const T>(dresidual) : nullptr, ptr<T>(dx), rows, C, dx_vec);
        CUDA_CHECK_LAUNCH("rms_norm_backward_dx_kernel");
      }
      launch_dweight_partial<T>(x, dy, rstd, partial, rows, C, rows_per_chunk, num_chunks, stream);
    }
    rms_norm_dweight_finish_kernel<T><<<static_cast<unsigned>(ceil_div(C, kColThreads)),
                                        dim3(kColThreads, kFinishLanes), 0, stream>>>(
        num_chunks > 0 ? ptr<const float>(partial) : nullptr, num_chunks, C, ptr<T>(dweight));
    CUDA_CHECK_LAUNCH("rms_norm_dweight_finish_kernel");
  });
}

}  // namespace microllm::ops
