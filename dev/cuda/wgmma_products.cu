// wgmma_products: the three warpgroup MMA (wgmma) product forms of the library's Hopper flash
// attention kernels (src/ops/attention/flash_attention_wgmma*_cuda.cu, helpers in
// wgmma.cuh), each on one 64 × 64 × 64 BF16 case through one warpgroup, against the host (F64):
//   C1 = A · Bᵀ   A, B in shared memory, both K-major (S = Q · Kᵀ; Sᵀ = K · Qᵀ; dPᵀ = V · dOᵀ)
//   C2 = A · V    A in registers (the m16n8k16 fragment), V in shared memory MN-major
//                 (O += P · V; dV += Pᵀ · dO; dK += dSᵀ · Q)
//   C3 = Aᵀ · V   both in shared memory, both MN-major (dQ += dS · K from the dSᵀ scratch)
// and the N = 128 forms of the first two (S over 128 keys; O += P · V at D 128, where the
// MN-major leading offset reaches V's second 64-column atom).
// The shared-memory tiles are 128-byte swizzled as the kernels lay them out. If the documented
// descriptor offsets fail, the run repeats with the leading and stride offsets exchanged and
// says which passes, so one device run settles the layout question. The kernels themselves are
// tested and measured by the library's tests (CudaFlashWgmma.*) and the ops benchmark.
//
// Build: make -C dev/cuda    Run: ./build/wgmma_products
#include <cstring>
#include <string>
#include <utility>

#include "common.h"
#include "wgmma.h"

namespace {

using namespace lab;
using bf16 = __nv_bfloat16;
constexpr int kWarp = 32;
constexpr int kGroupThreads = 128;  // a warpgroup

// The m16n8k16 A fragment of a (64, 64) row-major: this warp's rows 16·warp + g (+8),
// columns 16·ks + 2c (+1) (+8), as BF16 pairs.
__device__ void a_fragment(uint32_t (&frag)[4], const bf16* a, int ks) {
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp, g = lane / 4, c = lane % 4;
  auto at = [&](int row, int col) {
    return __bfloat162float(a[(16 * warp + row) * 64 + 16 * ks + col]);
  };
  frag[0] = pack_bf16(at(g, 2 * c), at(g, 2 * c + 1));
  frag[1] = pack_bf16(at(g + 8, 2 * c), at(g + 8, 2 * c + 1));
  frag[2] = pack_bf16(at(g, 2 * c + 8), at(g, 2 * c + 9));
  frag[3] = pack_bf16(at(g + 8, 2 * c + 8), at(g + 8, 2 * c + 9));
}

// Stores a warpgroup's (64, N) accumulator row-major: element e is row 16·warp + g +
// 8·((e % 4) / 2), column 8·(e / 4) + 2c + e % 2.
template <int N>
__device__ void store_accumulator(float* out, const float (&d)[N / 2]) {
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp, g = lane / 4, c = lane % 4;
  for (int e = 0; e < N / 2; ++e)
    out[(16 * warp + g + 8 * ((e % 4) / 2)) * N + 8 * (e / 4) + 2 * c + e % 2] = d[e];
}

// c1 (64, 64) = a (64, 64) · bᵀ, b (64, 64) row-major (N, K); c2 (64, 64) = a · v, v (64, 64)
// row-major (K, N); c3 = aᵀ · v. F32 out, row-major. The descriptors' byte offsets are arguments,
// so that a failing case can be retried with them exchanged (which one the hardware reads for
// what).
__global__ void __launch_bounds__(kGroupThreads)
    unit_kernel(const bf16* a, const bf16* b, const bf16* v, float* c1, float* c2, float* c3,
                uint32_t k_leading, uint32_t k_stride, uint32_t mn_leading, uint32_t mn_stride) {
  __shared__ __align__(1024) uint8_t a_tile[64 * 128], b_tile[64 * 128], v_tile[64 * 128];
  const int t = threadIdx.x;
  load_tile<64>(a_tile, a, 64, 64, t, kGroupThreads);
  load_tile<64>(b_tile, b, 64, 64, t, kGroupThreads);
  load_tile<64>(v_tile, v, 64, 64, t, kGroupThreads);
  commit_async();
  wait_async<0>();
  fence_async_shared();
  __syncthreads();
  float d[32];
  wgmma_fence();
#pragma unroll
  for (int ks = 0; ks < 4; ++ks)
    wgmma_ss_n64<0, 0>(d, descriptor(a_tile + ks * 32, k_leading, k_stride),
                       descriptor(b_tile + ks * 32, k_leading, k_stride), ks > 0);
  wgmma_commit();
  wgmma_wait<0>();
  fence_registers(d);
  store_accumulator<64>(c1, d);
  float d2[32];
  wgmma_fence();
#pragma unroll
  for (int ks = 0; ks < 4; ++ks) {
    uint32_t frag[4];
    a_fragment(frag, a, ks);
    wgmma_rs_n64<1>(d2, frag, descriptor(v_tile + ks * 16 * 128, mn_leading, mn_stride), ks > 0);
  }
  wgmma_commit();
  wgmma_wait<0>();
  fence_registers(d2);
  store_accumulator<64>(c2, d2);
  // A = aᵀ: a holds it along M (MN-major), a k16 step is 16 rows of a further.
  float d3[32];
  wgmma_fence();
#pragma unroll
  for (int ks = 0; ks < 4; ++ks)
    wgmma_ss_n64<1, 1>(d3, descriptor(a_tile + ks * 16 * 128, mn_leading, mn_stride),
                       descriptor(v_tile + ks * 16 * 128, mn_leading, mn_stride), ks > 0);
  wgmma_commit();
  wgmma_wait<0>();
  fence_registers(d3);
  store_accumulator<64>(c3, d3);
}

// The N = 128 forms of the forward (S over 128 keys; O += P · V at D 128, where V's second
// 64-column atom is reached through the MN-major leading offset): c4 (64, 128) = a · wᵀ, w
// (128, 64) row-major (N, K); c5 (64, 128) = a · x, x (64, 128) row-major (K, N).
__global__ void __launch_bounds__(kGroupThreads)
    wide_kernel(const bf16* a, const bf16* w, const bf16* x, float* c4, float* c5,
                uint32_t mn_leading, uint32_t mn_stride) {
  __shared__ __align__(1024) uint8_t a_tile[64 * 128], w_tile[128 * 128], x_tile[64 * 256];
  const int t = threadIdx.x;
  load_tile<64>(a_tile, a, 64, 64, t, kGroupThreads);
  load_tile<64>(w_tile, w, 128, 64, t, kGroupThreads);
  load_tile<128>(x_tile, x, 64, 128, t, kGroupThreads);
  commit_async();
  wait_async<0>();
  fence_async_shared();
  __syncthreads();
  float d[64];
  wgmma_fence();
#pragma unroll
  for (int ks = 0; ks < 4; ++ks)
    wgmma_ss_n128<0, 0>(d, descriptor(a_tile + ks * 32, 16, 1024),
                        descriptor(w_tile + ks * 32, 16, 1024), ks > 0);
  wgmma_commit();
  wgmma_wait<0>();
  fence_registers(d);
  store_accumulator<128>(c4, d);
  float d2[64];
  wgmma_fence();
#pragma unroll
  for (int ks = 0; ks < 4; ++ks) {
    uint32_t frag[4];
    a_fragment(frag, a, ks);
    wgmma_rs_n128<1>(d2, frag, descriptor(x_tile + ks * 16 * 128, mn_leading, mn_stride), ks > 0);
  }
  wgmma_commit();
  wgmma_wait<0>();
  fence_registers(d2);
  store_accumulator<128>(c5, d2);
}

bool run_wide() {
  const auto a = lab::random_bf16(64 * 64, 14), w = lab::random_bf16(128 * 64, 15),
             x = lab::random_bf16(64 * 128, 16);
  const auto af = lab::to_float(a), wf = lab::to_float(w), xf = lab::to_float(x);
  std::vector<double> ref4(64 * 128), ref5(64 * 128);
  for (int i = 0; i < 64; ++i)
    for (int j = 0; j < 128; ++j) {
      double s4 = 0.0, s5 = 0.0;
      for (int k = 0; k < 64; ++k) {
        s4 += static_cast<double>(af[i * 64 + k]) * wf[j * 64 + k];
        s5 += static_cast<double>(af[i * 64 + k]) * xf[k * 128 + j];
      }
      ref4[i * 128 + j] = s4;
      ref5[i * 128 + j] = s5;
    }
  bf16 *da, *dw, *dx;
  float *dc4, *dc5;
  CUDA_CHECK(cudaMalloc(&da, 64 * 64 * 2));
  CUDA_CHECK(cudaMalloc(&dw, 128 * 64 * 2));
  CUDA_CHECK(cudaMalloc(&dx, 64 * 128 * 2));
  CUDA_CHECK(cudaMalloc(&dc4, 64 * 128 * 4));
  CUDA_CHECK(cudaMalloc(&dc5, 64 * 128 * 4));
  CUDA_CHECK(cudaMemcpy(da, a.data(), 64 * 64 * 2, cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpy(dw, w.data(), 128 * 64 * 2, cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpy(dx, x.data(), 64 * 128 * 2, cudaMemcpyHostToDevice));
  auto run = [&](uint32_t ml, uint32_t ms) {
    lab::poison_nan(dc4, 64 * 128 * 4);
    lab::poison_nan(dc5, 64 * 128 * 4);
    wide_kernel<<<1, kGroupThreads>>>(da, dw, dx, dc4, dc5, ml, ms);
    CUDA_CHECK(cudaGetLastError());
    CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<float> c4(64 * 128), c5(64 * 128);
    CUDA_CHECK(cudaMemcpy(c4.data(), dc4, 64 * 128 * 4, cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(c5.data(), dc5, 64 * 128 * 4, cudaMemcpyDeviceToHost));
    const auto r4 = lab::compare("A·Wᵀ", c4.data(), ref4.data(), 64 * 128, lab::kToleranceF32);
    const auto r5 = lab::compare("A·X", c5.data(), ref5.data(), 64 * 128, lab::kToleranceF32);
    std::printf("wide  A·Wᵀ ss k-major n128                          rel L2 %.3g %s\n", r4.rel_l2,
                r4.ok ? "ok" : "FAIL");
    std::printf("wide  A·X  rs mn-major n128 (leading %u, stride %u) rel L2 %.3g %s\n", ml, ms,
                r5.rel_l2, r5.ok ? "ok" : "FAIL");
    return r4.ok && r5.ok;
  };
  const bool ok = run(64 * 128, 1024);
  if (!ok) run(1024, 64 * 128);  // diagnostic only
  for (void* p : {static_cast<void*>(da), static_cast<void*>(dw), static_cast<void*>(dx),
                  static_cast<void*>(dc4), static_cast<void*>(dc5)})
    CUDA_CHECK(cudaFree(p));
  return ok;
}

bool run_unit() {
  const auto a = lab::random_bf16(64 * 64, 11), b = lab::random_bf16(64 * 64, 12),
             v = lab::random_bf16(64 * 64, 13);
  const auto af = lab::to_float(a), bf = lab::to_float(b), vf = lab::to_float(v);
  std::vector<double> ref1(64 * 64), ref2(64 * 64), ref3(64 * 64);
  for (int i = 0; i < 64; ++i)
    for (int j = 0; j < 64; ++j) {
      double s1 = 0.0, s2 = 0.0, s3 = 0.0;
      for (int x = 0; x < 64; ++x) {
        s1 += static_cast<double>(af[i * 64 + x]) * bf[j * 64 + x];
        s2 += static_cast<double>(af[i * 64 + x]) * vf[x * 64 + j];
        s3 += static_cast<double>(af[x * 64 + i]) * vf[x * 64 + j];
      }
      ref1[i * 64 + j] = s1;
      ref2[i * 64 + j] = s2;
      ref3[i * 64 + j] = s3;
    }
  bf16 *da, *db, *dv;
  float *dc1, *dc2, *dc3;
  CUDA_CHECK(cudaMalloc(&da, 64 * 64 * 2));
  CUDA_CHECK(cudaMalloc(&db, 64 * 64 * 2));
  CUDA_CHECK(cudaMalloc(&dv, 64 * 64 * 2));
  CUDA_CHECK(cudaMalloc(&dc1, 64 * 64 * 4));
  CUDA_CHECK(cudaMalloc(&dc2, 64 * 64 * 4));
  CUDA_CHECK(cudaMalloc(&dc3, 64 * 64 * 4));
  CUDA_CHECK(cudaMemcpy(da, a.data(), 64 * 64 * 2, cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpy(db, b.data(), 64 * 64 * 2, cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpy(dv, v.data(), 64 * 64 * 2, cudaMemcpyHostToDevice));
  // The documented offsets first (wgmma.cuh); with them exchanged only if those fail.
  auto run = [&](uint32_t kl, uint32_t ks, uint32_t ml, uint32_t ms) {
    lab::poison_nan(dc1, 64 * 64 * 4);
    lab::poison_nan(dc2, 64 * 64 * 4);
    lab::poison_nan(dc3, 64 * 64 * 4);
    unit_kernel<<<1, kGroupThreads>>>(da, db, dv, dc1, dc2, dc3, kl, ks, ml, ms);
    CUDA_CHECK(cudaGetLastError());
    CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<float> c1(64 * 64), c2(64 * 64), c3(64 * 64);
    CUDA_CHECK(cudaMemcpy(c1.data(), dc1, 64 * 64 * 4, cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(c2.data(), dc2, 64 * 64 * 4, cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(c3.data(), dc3, 64 * 64 * 4, cudaMemcpyDeviceToHost));
    const auto r1 = lab::compare("A·Bᵀ", c1.data(), ref1.data(), 64 * 64, lab::kToleranceF32);
    const auto r2 = lab::compare("A·V", c2.data(), ref2.data(), 64 * 64, lab::kToleranceF32);
    const auto r3 = lab::compare("Aᵀ·V", c3.data(), ref3.data(), 64 * 64, lab::kToleranceF32);
    std::printf("unit  A·Bᵀ ss k-major  (leading %u, stride %u)  rel L2 %.3g %s\n", kl, ks,
                r1.rel_l2, r1.ok ? "ok" : "FAIL");
    std::printf("unit  A·V  rs mn-major (leading %u, stride %u)  rel L2 %.3g %s\n", ml, ms,
                r2.rel_l2, r2.ok ? "ok" : "FAIL");
    std::printf("unit  Aᵀ·V ss mn-major (leading %u, stride %u)  rel L2 %.3g %s\n", ml, ms,
                r3.rel_l2, r3.ok ? "ok" : "FAIL");
    return r1.ok && r2.ok && r3.ok;
  };
  const bool ok = run(16, 1024, 64 * 128, 1024);
  if (!ok) run(1024, 16, 1024, 64 * 128);  // diagnostic only
  for (void* p : {static_cast<void*>(da), static_cast<void*>(db), static_cast<void*>(dv),
                  static_cast<void*>(dc1), static_cast<void*>(dc2), static_cast<void*>(dc3)})
    CUDA_CHECK(cudaFree(p));
  return ok;
}

}  // namespace

int main() {
  const char* program = "wgmma_products";
  lab::require_device(program);
  lab::require_kernel_image(program, unit_kernel);
  const bool unit_ok = run_unit();
  const bool ok = run_wide() && unit_ok;
  std::printf(ok ? "all checks passed\n" : "CHECK FAILED\n");
  return ok ? 0 : 1;
}
