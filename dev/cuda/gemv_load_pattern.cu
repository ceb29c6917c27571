// gemv_load_pattern: how fast W (N, K) BF16 streams from HBM under the decode GEMVs' load
// patterns, with nothing else in the kernel (no x, no products: each lane folds its words
// with XOR so that the loads stay live). Same bytes and the same 16-byte loads in flight per
// lane in each pattern; what differs is which bytes one warp instruction touches:
//   fragment    the tensor-core GEMV (src/ops/matmul/gemv_tensor_core_cuda.cu): a warp per 8
//               rows, lane (g = lane / 4, c = lane % 4) loads group 4u + c of row g, 16 loads
//               a pass: an instruction touches 64 bytes of each of 8 rows;
//   contiguous  the same warps and tiles (8 whole rows are 8·K contiguous elements), lane
//               loads 16 bytes at 512·i + 16·lane of the tile: 512 contiguous bytes an
//               instruction, 16 loads a pass;
//   rowwise     the CUDA-core GEMV (gemv_cuda.cu): a warp per row, 4 loads a lane a pass.
// Each launch reads its own copy of W (copies_beyond_l2), so every byte comes from HBM.
//
// Build: make -C dev/cuda    Run: ./build/gemv_load_pattern [N K]
// Without N K it runs the Qwen2.5-0.5B decode shapes (LM head, gate/up, down, QKV).
#include <string>

#include "common.h"

namespace {

constexpr int kWarp = 32;
constexpr int kThreads = 256;
constexpr int kWarps = kThreads / kWarp;
constexpr int kTileRows = 8;

__device__ __forceinline__ unsigned fold(const uint4& v) { return v.x ^ v.y ^ v.z ^ v.w; }

// 16 loads a lane a pass; a warp walks tiles t = global warp, + all warps, ...
template <bool kFragment>
__global__ void __launch_bounds__(kThreads)
    tiles_kernel(const uint4* w, int64_t tiles, int groups, unsigned* out) {
  const int lane = threadIdx.x % kWarp, g = lane / 4, c = lane % 4;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * kWarps;
  unsigned acc = 0;
  for (int64_t t = blockIdx.x * kWarps + threadIdx.x / kWarp; t < tiles; t += warps) {
    const uint4* tile = w + t * kTileRows * groups;  // (8, groups)
    const int tile_groups = kTileRows * groups;
    for (int p0 = 0; p0 < tile_groups; p0 += 16 * kWarp) {  // a pass: 16 loads of a lane
      uint4 v[16];
#pragma unroll
      for (int u = 0; u < 16; ++u) {
        int at;
        if constexpr (kFragment) {  // row g, group 4u + c of this pass's 64 groups a row
          const int gi = p0 / kTileRows + 4 * u + c;
          at = gi < groups ? g * groups + gi : -1;
        } else {
          at = p0 + u * kWarp + lane;
          at = at < tile_groups ? at : -1;
        }
        v[u] = at >= 0 ? __ldcs(tile + at) : make_uint4(0, 0, 0, 0);
      }
#pragma unroll
      for (int u = 0; u < 16; ++u) acc ^= fold(v[u]);
    }
  }
  if (acc == 0x9e3779b9u) out[0] = acc;  // practically never: keeps the loads
}

// A warp per row, 4 loads a lane a pass.
__global__ void __launch_bounds__(kThreads)
    rows_kernel(const uint4* w, int64_t rows, int groups, unsigned* out) {
  const int lane = threadIdx.x % kWarp;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * kWarps;
  unsigned acc = 0;
  for (int64_t r = blockIdx.x * kWarps + threadIdx.x / kWarp; r < rows; r += warps) {
    const uint4* row = w + r * groups;
    for (int g0 = lane; g0 < groups; g0 += 4 * kWarp) {
      uint4 v[4];
#pragma unroll
      for (int u = 0; u < 4; ++u)
        v[u] = g0 + u * kWarp < groups ? __ldcs(row + g0 + u * kWarp) : make_uint4(0, 0, 0, 0);
#pragma unroll
      for (int u = 0; u < 4; ++u) acc ^= fold(v[u]);
    }
  }
  if (acc == 0x9e3779b9u) out[0] = acc;
}

void run_shape(const cudaDeviceProp& prop, const std::string& name, int64_t N, int K) {
  const int groups = K / 8;  // 16-byte groups of a BF16 row
  const size_t bytes = static_cast<size_t>(N) * K * 2;
  const int copies = lab::copies_beyond_l2(bytes, prop);
  uint4* w = nullptr;
  unsigned* out = nullptr;
  CUDA_CHECK(cudaMalloc(&w, bytes * copies));
  CUDA_CHECK(cudaMalloc(&out, sizeof(unsigned)));
  CUDA_CHECK(cudaMemset(w, 0x5a, bytes * copies));
  const int64_t tiles = N / kTileRows;  // the shapes here are whole tiles
  const auto at = [&](int i) { return w + static_cast<size_t>(i % copies) * (bytes / 16); };
  auto report = [&](const char* pattern, int blocks, double us) {
    std::printf("%-10s %-11s N %7lld K %5d  %4d blocks  %9.2f us  %6.2f TB/s\n", name.c_str(),
                pattern, static_cast<long long>(N), K, blocks, us, bytes / us / 1e6);
  };
  for (int per_sm : {1, 2}) {
    const int blocks = static_cast<int>(std::min<int64_t>(
        static_cast<int64_t>(prop.multiProcessorCount) * per_sm, (tiles + kWarps - 1) / kWarps));
    report("fragment", blocks,
           lab::median_launch_us(
               [&](int i) { tiles_kernel<true><<<blocks, kThreads>>>(at(i), tiles, groups, out); },
               1));
    report("contiguous", blocks,
           lab::median_launch_us(
               [&](int i) { tiles_kernel<false><<<blocks, kThreads>>>(at(i), tiles, groups, out); },
               1));
  }
  for (int per_sm : {3, 4}) {
    const int blocks = static_cast<int>(std::min<int64_t>(
        static_cast<int64_t>(prop.multiProcessorCount) * per_sm, (N + kWarps - 1) / kWarps));
    report("rowwise", blocks,
           lab::median_launch_us(
               [&](int i) { rows_kernel<<<blocks, kThreads>>>(at(i), N, groups, out); }, 1));
  }
  CUDA_CHECK(cudaFree(w));
  CUDA_CHECK(cudaFree(out));
}

}  // namespace

int main(int argc, char** argv) {
  const cudaDeviceProp prop = lab::require_device("gemv_load_pattern");
  lab::require_kernel_image("gemv_load_pattern", tiles_kernel<true>);
  if (argc == 3) {
    run_shape(prop, "custom", std::stoll(argv[1]), std::stoi(argv[2]));
    return 0;
  }
  run_shape(prop, "lm_head", 151936, 896);
  run_shape(prop, "gate_up", 9728, 896);
  run_shape(prop, "down", 896, 4864);
  run_shape(prop, "qkv", 1152, 896);
  return 0;
}
