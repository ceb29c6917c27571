// gemv_bf16: the decode GEMV, y (M, N) = x (M, K) · Wᵀ for M = 1..8 rows, with W (N, K)
// row-major BF16 as Hugging Face stores an nn.Linear weight, x BF16, F32 accumulation and
// a BF16 y (torch.nn.functional.linear without bias). Layout: x (M, K), W (N, K), y (M, N),
// all dense row-major. The CPU reference (F64 accumulation) is gemv_cpu below.
//
// At M <= 8 the kernel does 2·M FLOPs per 2 bytes of W, far below the ~190 FLOP/byte where
// the H200 stops being bandwidth bound, so the goal is to stream W at the copy bandwidth.
//   variant 1  one warp per row of W; scalar 2-byte loads; one pass over K per row of x
//   variant 2  one warp per row of W, 4 rows per block; 16-byte loads (8 BF16); W is read
//              once for all M rows of x; warp-shuffle reduction
//   variant 3  variant 2 with 4 independent 16-byte loads of W in flight per lane, streaming
//              (evict-first) loads of W, and split-K over the warps of a block when N alone
//              gives too few warps (the down projection)
//   variant 4  variant 3 with each warp computing kRowsPerWarpV4 rows of W: every 16-byte
//              load of x serves that many rows, so at M = 8 the L1 traffic per byte of W
//              falls from 8× to 8/kRowsPerWarpV4 × (variant 3 is bound by it there)
// Every variant is batch invariant: the summation order of an output element does not
// depend on M, so a row of x gives bitwise the same y alone or in a batch (checked below).
//
// Build: make -C dev/cuda    Run: ./build/gemv_bf16 <variant 1|2|3|4|all> [M] [N K]
// Without N K it runs the Qwen2.5-0.5B decode shapes; without M it runs M = 1, 2, 4, 8.
#include <cstring>
#include <string>
#include <type_traits>

#include "common.h"

namespace {

using bf16 = __nv_bfloat16;
constexpr int kWarp = 32;
constexpr int kMaxRows = 8;  // M

// ---- CPU reference -----------------------------------------------------------------------

// y (M, N) in F64 from x (M, K) and w (N, K): BF16 values, widened exactly to F32.
void gemv_cpu(const std::vector<float>& x, const std::vector<float>& w, std::vector<double>& y,
              int M, int N, int K) {
  for (int n = 0; n < N; ++n) {
    const float* w_row = w.data() + static_cast<int64_t>(n) * K;  // (K)
    for (int m = 0; m < M; ++m) {
      const float* x_row = x.data() + static_cast<int64_t>(m) * K;  // (K)
      double acc = 0.0;
      for (int k = 0; k < K; ++k) acc += static_cast<double>(x_row[k]) * w_row[k];
      y[static_cast<int64_t>(m) * N + n] = acc;
    }
  }
}

// ---- device helpers ------------------------------------------------------------------------

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int offset = kWarp / 2; offset > 0; offset /= 2)
    v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;  // every lane holds the sum
}

// Σ a[i]·b[i] over the 8 BF16 values packed in each uint4, in F32, in a fixed order.
__device__ __forceinline__ float dot8(uint4 a, uint4 b) {
  const __nv_bfloat162* a2 = reinterpret_cast<const __nv_bfloat162*>(&a);  // (4) pairs
  const __nv_bfloat162* b2 = reinterpret_cast<const __nv_bfloat162*>(&b);  // (4) pairs
  float s = 0.0f;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 fa = __bfloat1622float2(a2[i]), fb = __bfloat1622float2(b2[i]);
    s = fmaf(fa.x, fb.x, s);
    s = fmaf(fa.y, fb.y, s);
  }
  return s;
}

// ---- variant 1: one warp per row of W, scalar loads ------------------------------------------

constexpr int kThreadsV1 = 256;

// x (M, K), w (N, K), y (M, N). Lanes stride over K two bytes at a time; the row of W is
// re-read for each row of x (from L1 after the first pass).
__global__ void gemv_v1(const bf16* x, const bf16* w, bf16* y, int M, int N, int K) {
  const int lane = threadIdx.x % kWarp;
  const int64_t n = static_cast<int64_t>(blockIdx.x) * (kThreadsV1 / kWarp) + threadIdx.x / kWarp;
  if (n >= N) return;             // the whole warp leaves together
  const bf16* w_row = w + n * K;  // (K)
  for (int m = 0; m < M; ++m) {
    const bf16* x_row = x + static_cast<int64_t>(m) * K;  // (K)
    float acc = 0.0f;
    for (int k = lane; k < K; k += kWarp)
      acc = fmaf(__bfloat162float(x_row[k]), __bfloat162float(w_row[k]), acc);
    acc = warp_sum(acc);
    if (lane == 0) y[static_cast<int64_t>(m) * N + n] = __float2bfloat16(acc);
  }
}

// ---- variant 2: 16-byte loads, 4 rows per block, W read once for all rows of x --------------

constexpr int kRowsPerBlockV2 = 4;  // one warp per row of W

// x (M, K), w (N, K), y (M, N), K % 8 == 0. Each lane loads 8 BF16 of W at once (a warp reads
// 512 contiguous bytes per step instead of 64) and uses them for all M rows of x, held in M
// accumulators, so W crosses the memory bus once whatever M is.
template <int M>
__global__ void __launch_bounds__(kRowsPerBlockV2* kWarp)
    gemv_v2(const bf16* x, const bf16* w, bf16* y, int N, int K) {
  const int lane = threadIdx.x % kWarp;
  const int64_t n = static_cast<int64_t>(blockIdx.x) * kRowsPerBlockV2 + threadIdx.x / kWarp;
  if (n >= N) return;
  const int groups = K / 8;                                        // 16-byte groups per row
  const uint4* w_row = reinterpret_cast<const uint4*>(w + n * K);  // (K/8)
  const uint4* x_groups = reinterpret_cast<const uint4*>(x);       // (M, K/8)
  float acc[M] = {};
  for (int g = lane; g < groups; g += kWarp) {
    const uint4 wv = w_row[g];
#pragma unroll
    for (int m = 0; m < M; ++m) acc[m] += dot8(x_groups[m * groups + g], wv);
  }
#pragma unroll
  for (int m = 0; m < M; ++m) {
    const float total = warp_sum(acc[m]);
    if (lane == m) y[static_cast<int64_t>(m) * N + n] = __float2bfloat16(total);  // spread stores
  }
}

// ---- variant 3: more bytes in flight, streaming loads, split-K ------------------------------

constexpr int kWarpsV3 = 8;
constexpr int kLoadsInFlight = 4;  // 16-byte loads of W a lane issues before using any
constexpr int kMaxSplits = kWarpsV3;
// Warps wanted in the grid before split-K stops: about 32 per SM on 132 SMs. A constant, not
// the device's SM count, so the summation order depends on N and K only.
constexpr int64_t kTargetWarps = 4096;

// Why: by Little's law, streaming at 4.25 TB/s with several hundred nanoseconds of DRAM
// latency needs a few MB in flight across the GPU (~20 KiB per SM). Variant 2 keeps one
// 16-byte load per lane in flight; with N = 896 rows (the down projection) that is 896 warps
// × 512 B = 0.46 MB, a fraction of it. Here (1) each lane issues kLoadsInFlight loads of W
// back to back before any arithmetic, 4× the bytes in flight per warp; (2) W is loaded with
// __ldcs (evict-first): it is read exactly once, and keeping it out of L1/L2 leaves room for
// x, which every warp re-reads (through __ldg, the read-only path); (3) when N alone gives
// fewer than kTargetWarps warps, the K of each row is split over `splits` warps of the block
// and the partial sums are added in slice order in shared memory (deterministic, no atomics).
//
// x (M, K), w (N, K), y (M, N), K % 8 == 0; splits in {1, 2, 4, 8}; the block holds
// kWarpsV3 / splits rows of W.
template <int M>
__global__ void __launch_bounds__(kWarpsV3* kWarp)
    gemv_v3(const bf16* x, const bf16* w, bf16* y, int N, int K, int splits) {
  __shared__ float partial[kWarpsV3][M];  // (warps, M) each warp's sum over its K slice
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int rows_per_block = kWarpsV3 / splits;
  const int64_t first_row = static_cast<int64_t>(blockIdx.x) * rows_per_block;
  const int64_t n = first_row + warp / splits;
  const int slice = warp % splits;
  const int groups = K / 8;  // 16-byte groups per row
  const int per_slice = (groups + splits - 1) / splits;
  const int begin = slice * per_slice, end = min(groups, begin + per_slice);
  float acc[M] = {};
  if (n < N) {  // no early return: the whole block meets at __syncthreads below
    const uint4* w_row = reinterpret_cast<const uint4*>(w + n * K);  // (K/8)
    const uint4* x_groups = reinterpret_cast<const uint4*>(x);       // (M, K/8)
    for (int g0 = begin + lane; g0 < end; g0 += kWarp * kLoadsInFlight) {
      uint4 wv[kLoadsInFlight];  // all loads issued before the first is used
#pragma unroll
      for (int u = 0; u < kLoadsInFlight; ++u) {
        const int g = g0 + u * kWarp;
        wv[u] = g < end ? __ldcs(w_row + g) : make_uint4(0, 0, 0, 0);
      }
#pragma unroll
      for (int u = 0; u < kLoadsInFlight; ++u) {
        const int g = g0 + u * kWarp;
        if (g >= end) break;
#pragma unroll
        for (int m = 0; m < M; ++m) acc[m] += dot8(__ldg(x_groups + m * groups + g), wv[u]);
      }
    }
  }
#pragma unroll
  for (int m = 0; m < M; ++m) {
    const float total = warp_sum(acc[m]);
    if (lane == 0) partial[warp][m] = total;
  }
  __syncthreads();
  // One thread per (row of the block, row of x) adds the slices in order.
  const int t = threadIdx.x;
  if (t < rows_per_block * M) {
    const int r = t / M, m = t % M;
    if (first_row + r < N) {
      float sum = partial[r * splits][m];
      for (int s = 1; s < splits; ++s) sum += partial[r * splits + s][m];
      y[static_cast<int64_t>(m) * N + first_row + r] = __float2bfloat16(sum);
    }
  }
}

// Split-K factor of variant 3 for a row count and K: double while the grid is short of
// kTargetWarps and each slice keeps at least two warp-wide passes (64 groups = 1 KiB of W).
int splits_for(int N, int K) {
  const int groups = K / 8;
  int splits = 1;
  while (splits < kMaxSplits && static_cast<int64_t>(N) * splits < kTargetWarps &&
         groups / (2 * splits) >= 2 * kWarp)
    splits *= 2;
  return splits;
}

// ---- variant 4: several rows of W per warp -------------------------------------------------

// At M rows a lane of variant 3 loads M 16-byte groups of x (from L1) per 16-byte group of W;
// at M = 8 that is 8 × the W bytes through L1, about as much as L1 delivers on an H200 when
// W streams at ~4 TB/s. Here a warp takes kRowsPerWarpV4 consecutive rows of W: per K group
// it loads their W groups (in flight together) and each x group once, and does
// kRowsPerWarpV4 · M dot products with it. The summation order of an output element is the
// same as variant 3's without split-K (one lane-strided pass, then the warp sum), and it
// still does not depend on M.
constexpr int kRowsPerWarpV4 = 4;
constexpr int kWarpsV4 = 8;

// x (M, K), w (N, K), y (M, N), K % 8 == 0; splits in {1, 2, 4, 8}: as in variant 3, the K
// of a row group is split over `splits` warps of the block (the short down projection) and
// the slices are added in order; the block holds (kWarpsV4 / splits) · kRowsPerWarpV4 rows.
template <int M>
__global__ void __launch_bounds__(kWarpsV4* kWarp)
    gemv_v4(const bf16* x, const bf16* w, bf16* y, int N, int K, int splits) {
  __shared__ float partial[kWarpsV4][kRowsPerWarpV4][M];  // each warp's sums over its slice
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int groups_per_block = kWarpsV4 / splits;
  const int64_t block_first = static_cast<int64_t>(blockIdx.x) * groups_per_block * kRowsPerWarpV4;
  const int64_t first = block_first + (warp / splits) * kRowsPerWarpV4;
  const int slice = warp % splits;
  const int groups = K / 8;
  const int per_slice = (groups + splits - 1) / splits;
  const int begin = slice * per_slice, end = min(groups, begin + per_slice);
  const uint4* x_groups = reinterpret_cast<const uint4*>(x);  // (M, K/8)
  float acc[kRowsPerWarpV4][M] = {};
  for (int g = begin + lane; g < end; g += kWarp) {
    uint4 wv[kRowsPerWarpV4];  // the rows' groups, loaded before any is used
#pragma unroll
    for (int r = 0; r < kRowsPerWarpV4; ++r)
      wv[r] = first + r < N ? __ldcs(reinterpret_cast<const uint4*>(w + (first + r) * K) + g)
                            : make_uint4(0, 0, 0, 0);
#pragma unroll
    for (int m = 0; m < M; ++m) {
      const uint4 xv = __ldg(x_groups + m * groups + g);
#pragma unroll
      for (int r = 0; r < kRowsPerWarpV4; ++r) acc[r][m] += dot8(xv, wv[r]);
    }
  }
#pragma unroll
  for (int r = 0; r < kRowsPerWarpV4; ++r)
#pragma unroll
    for (int m = 0; m < M; ++m) {
      const float total = warp_sum(acc[r][m]);
      if (lane == 0) partial[warp][r][m] = total;
    }
  __syncthreads();
  // One thread per (row of the block, row of x) adds the slices in order.
  const int t = threadIdx.x, rows_in_block = groups_per_block * kRowsPerWarpV4;
  if (t >= rows_in_block * M) return;
  const int row = t / M, m = t % M;
  const int group = row / kRowsPerWarpV4, r = row % kRowsPerWarpV4;
  if (block_first + row >= N) return;
  float sum = partial[group * splits][r][m];
  for (int s = 1; s < splits; ++s) sum += partial[group * splits + s][r][m];
  y[static_cast<int64_t>(m) * N + block_first + row] = __float2bfloat16(sum);
}

// Split-K factor of variant 4: variant 3's rule over row groups instead of rows.
int splits_for_v4(int N, int K) { return splits_for((N + kRowsPerWarpV4 - 1) / kRowsPerWarpV4, K); }

// ---- launching -----------------------------------------------------------------------------

// Calls f(std::integral_constant<int, M>) for M in 1..8.
template <class F>
void dispatch_rows(int M, F&& f) {
  switch (M) {
    case 1:
      return f(std::integral_constant<int, 1>{});
    case 2:
      return f(std::integral_constant<int, 2>{});
    case 3:
      return f(std::integral_constant<int, 3>{});
    case 4:
      return f(std::integral_constant<int, 4>{});
    case 5:
      return f(std::integral_constant<int, 5>{});
    case 6:
      return f(std::integral_constant<int, 6>{});
    case 7:
      return f(std::integral_constant<int, 7>{});
    case 8:
      return f(std::integral_constant<int, 8>{});
    default:
      std::fprintf(stderr, "gemv_bf16: M = %d is outside 1..8\n", M);
      std::exit(2);
  }
}

unsigned blocks(int64_t items, int per_block) {
  return static_cast<unsigned>((items + per_block - 1) / per_block);
}

// x (M, K), w (N, K), y (M, N) on the device.
void launch(int variant, const bf16* x, const bf16* w, bf16* y, int M, int N, int K) {
  if (variant == 1) {
    gemv_v1<<<blocks(N, kThreadsV1 / kWarp), kThreadsV1>>>(x, w, y, M, N, K);
  } else if (variant == 2) {
    dispatch_rows(M, [&](auto rows) {
      gemv_v2<decltype(rows)::value>
          <<<blocks(N, kRowsPerBlockV2), kRowsPerBlockV2 * kWarp>>>(x, w, y, N, K);
    });
  } else if (variant == 3) {
    const int splits = splits_for(N, K);
    dispatch_rows(M, [&](auto rows) {
      gemv_v3<decltype(rows)::value>
          <<<blocks(N, kWarpsV3 / splits), kWarpsV3 * kWarp>>>(x, w, y, N, K, splits);
    });
  } else {
    const int splits = splits_for_v4(N, K);
    dispatch_rows(M, [&](auto rows) {
      gemv_v4<decltype(rows)::value>
          <<<blocks(N, kWarpsV4 / splits * kRowsPerWarpV4), kWarpsV4 * kWarp>>>(x, w, y, N, K,
                                                                                splits);
    });
  }
}

// ---- the run -------------------------------------------------------------------------------

struct Shape {
  const char* name;
  int N, K;
};
// Qwen2.5-0.5B: C = 896, F = 4864, V = 151936, H = 14 and Hkv = 2 heads of D = 64 (qkv fused:
// (14 + 2 + 2)·64 = 1152 rows; gate and up fused: 2·4864 = 9728 rows).
constexpr Shape kDecodeShapes[] = {{"qkv", 1152, 896},
                                   {"o", 896, 896},
                                   {"gate_up", 9728, 896},
                                   {"down", 896, 4864},
                                   {"lm_head", 151936, 896}};

void usage(const char* program) {
  std::fprintf(stderr,
               "usage: %s <variant 1|2|3|4|all> [M] [N K]\n"
               "  y (M, N) = x (M, K) · Wᵀ, BF16; M in 1..8 (default 1, 2, 4, 8);\n"
               "  without N K: the Qwen2.5-0.5B decode shapes qkv, o, gate_up, down, lm_head\n",
               program);
  std::exit(2);
}

int parse_int(const char* text, const char* program) {
  char* end = nullptr;
  const long v = std::strtol(text, &end, 10);
  if (end == text || *end != '\0' || v <= 0 || v > (1l << 30)) usage(program);
  return static_cast<int>(v);
}

// Validates and times the chosen variants on one shape for each M; false if any failed.
bool run_shape(const Shape& shape, const std::vector<int>& variants, const std::vector<int>& ms,
               const cudaDeviceProp& prop) {
  const int N = shape.N, K = shape.K;
  const int max_m = *std::max_element(ms.begin(), ms.end());
  // Inputs once per shape; the x of M rows is the first M rows of x, so one reference serves.
  const std::vector<bf16> x_host = lab::random_bf16(static_cast<size_t>(max_m) * K, 1);  // (M, K)
  const std::vector<bf16> w_host = lab::random_bf16(static_cast<size_t>(N) * K, 2);      // (N, K)
  std::vector<double> ref(static_cast<size_t>(max_m) * N);                               // (M, N)
  gemv_cpu(lab::to_float(x_host), lab::to_float(w_host), ref, max_m, N, K);

  // Rotating copies of W so that timed launches read it from HBM (see copies_beyond_l2).
  const size_t w_bytes = w_host.size() * sizeof(bf16);
  const int copies = lab::copies_beyond_l2(w_bytes, prop);
  bf16 *x = nullptr, *w = nullptr, *y = nullptr, *y_alone = nullptr;
  CUDA_CHECK(cudaMalloc(&x, x_host.size() * sizeof(bf16)));                   // (M, K)
  CUDA_CHECK(cudaMalloc(&w, w_bytes * copies));                               // copies × (N, K)
  CUDA_CHECK(cudaMalloc(&y, static_cast<size_t>(max_m) * N * sizeof(bf16)));  // (M, N)
  CUDA_CHECK(cudaMalloc(&y_alone, static_cast<size_t>(N) * sizeof(bf16)));    // (1, N)
  CUDA_CHECK(cudaMemcpy(x, x_host.data(), x_host.size() * sizeof(bf16), cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpy(w, w_host.data(), w_bytes, cudaMemcpyHostToDevice));
  for (int c = 1; c < copies; ++c)
    CUDA_CHECK(
        cudaMemcpy(w + static_cast<size_t>(c) * N * K, w, w_bytes, cudaMemcpyDeviceToDevice));

  bool all_ok = true;
  for (int variant : variants) {
    if (variant != 1 && K % 8 != 0) {
      std::printf("%-8s N=%6d K=%5d  variant %d skipped: it needs K %% 8 == 0 (16-byte rows)\n",
                  shape.name, N, K, variant);
      continue;
    }
    // y of x's row 0 alone, for the batch-invariance check.
    lab::poison_nan(y_alone, static_cast<size_t>(N) * sizeof(bf16));
    launch(variant, x, w, y_alone, 1, N, K);
    CUDA_CHECK(cudaGetLastError());
    std::vector<bf16> alone(N);
    CUDA_CHECK(cudaMemcpy(alone.data(), y_alone, N * sizeof(bf16), cudaMemcpyDeviceToHost));
    for (int M : ms) {
      const size_t y_elems = static_cast<size_t>(M) * N;
      lab::poison_nan(y, y_elems * sizeof(bf16));
      launch(variant, x, w, y, M, N, K);
      CUDA_CHECK(cudaGetLastError());
      std::vector<bf16> got(y_elems);  // (M, N)
      CUDA_CHECK(cudaMemcpy(got.data(), y, y_elems * sizeof(bf16), cudaMemcpyDeviceToHost));
      const lab::Comparison c =
          lab::compare("y", lab::to_float(got).data(), ref.data(), y_elems, lab::kToleranceBF16);
      const bool invariant = std::memcmp(got.data(), alone.data(), N * sizeof(bf16)) == 0;
      const double us = lab::median_launch_us(
          [&](int i) {
            launch(variant, x, w + static_cast<size_t>(i % copies) * N * K, y, M, N, K);
          },
          copies);
      const double bytes = 2.0 * (static_cast<double>(N) * K + static_cast<double>(M) * K +
                                  static_cast<double>(M) * N);  // W + x + y
      const double flops = 2.0 * M * static_cast<double>(N) * K;
      std::printf("%-8s N=%6d K=%5d  v%d", shape.name, N, K, variant);
      if (variant == 3 || variant == 4)
        std::printf(" (split %d)", variant == 3 ? splits_for(N, K) : splits_for_v4(N, K));
      else
        std::printf("          ");
      std::printf(" M=%d  max|err| %.2e  rel L2 %.2e  %s  %s ", M, c.max_abs, c.rel_l2,
                  c.ok ? "ok  " : "FAIL", invariant ? "batch-invariant" : "BATCH-VARIANT  ");
      lab::print_napkin(lab::napkin(us, bytes, flops));
      std::printf("\n");
      all_ok = all_ok && c.ok && invariant;
    }
  }
  CUDA_CHECK(cudaFree(x));
  CUDA_CHECK(cudaFree(w));
  CUDA_CHECK(cudaFree(y));
  CUDA_CHECK(cudaFree(y_alone));
  return all_ok;
}

}  // namespace

int main(int argc, char** argv) {
  const char* program = "gemv_bf16";
  if (argc < 2 || argc == 4 || argc > 5) usage(argv[0]);
  std::vector<int> variants;
  if (std::string(argv[1]) == "all")
    variants = {1, 2, 3, 4};
  else
    variants = {parse_int(argv[1], argv[0])};
  if (variants[0] > 4) usage(argv[0]);
  std::vector<int> ms = {1, 2, 4, 8};
  if (argc >= 3) ms = {parse_int(argv[2], argv[0])};
  if (ms[0] > kMaxRows) usage(argv[0]);
  std::vector<Shape> shapes(std::begin(kDecodeShapes), std::end(kDecodeShapes));
  if (argc == 5) shapes = {{"custom", parse_int(argv[3], argv[0]), parse_int(argv[4], argv[0])}};

  const cudaDeviceProp prop = lab::require_device(program);
  lab::require_kernel_image(program, gemv_v1);
  std::printf(
      "y (M, N) = x (M, K) · Wᵀ, BF16 in and out, F32 accumulation; tolerance bf16: "
      "|err| <= %.0e + %.4f·|ref|, rel L2 <= %.4f; W cold (rotating copies beyond L2)\n",
      lab::kToleranceBF16.atol, lab::kToleranceBF16.rtol, lab::kToleranceBF16.rel_l2);
  bool ok = true;
  for (const Shape& shape : shapes) ok = run_shape(shape, variants, ms, prop) && ok;
  std::printf(ok ? "all variants validated\n" : "VALIDATION FAILED\n");
  return ok ? 0 : 1;
}
