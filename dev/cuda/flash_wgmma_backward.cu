// flash_wgmma_backward: the causal flash attention backward, BF16, D 64, on Hopper's warpgroup
// MMA (wgmma), deterministic: no atomics. The step after the mma.sync backward of
// src/ops/attention (dK/dV at 117 TFLOP/s, docs/optimization-log.md). Layout as
// flash_wgmma.cu: q, o, do, dq (B, H, T, D), k, v, dk, dv (B, KV, T, D), lse and delta (B, H, T)
// F32 (delta = rowsum(do ∘ o)), S = T. The CPU reference (F64) is backward_cpu below.
//
//   variant 1  two kernels. dK/dV: a block owns 128 keys (two warpgroups of 64) of one KV
//              head, keeps K and V in shared memory, and walks the query tiles (64 rows,
//              double-buffered through cp.async) of every query head of its group, from the
//              first tile its keys can see: Sᵀ = K · Qᵀ and dPᵀ = V · dOᵀ (shared × shared,
//              both K-major), Pᵀ = exp(Sᵀ − lse) masked, dSᵀ = Pᵀ ∘ (dPᵀ − delta), then
//              dV += Pᵀ · dO and dK += dSᵀ · Q with Pᵀ and dSᵀ as register A operands and dO,
//              Q read MN-major. dSᵀ goes to a scratch (B, H, S, T) BF16. dQ: a block owns 128
//              query rows and sums dS · K over the key tiles (64 keys) its rows see, dS read
//              from the scratch MN-major (transposed A) and K MN-major.
//   Key-major products need no transposed copies: every operand is a tile as it lies in
//   global memory, read K-major or MN-major by the descriptor (wgmma.h).
//
// Build: make -C dev/cuda    Run: ./build/flash_wgmma_backward [check|bench|all]
#include <cmath>
#include <cstring>
#include <string>

#include "common.h"
#include "wgmma.h"

namespace {

using namespace lab;
using bf16 = __nv_bfloat16;
constexpr int D = 64;  // head dim (this lab: 64 only)
constexpr int kWarp = 32;
constexpr int kGroupThreads = 128;           // a warpgroup
constexpr int kGroupRows = 64;               // rows of a warpgroup's products (wgmma M)
constexpr int kThreads = 2 * kGroupThreads;  // two warpgroups a block
constexpr int kKeyBlock = 2 * kGroupRows;    // dK/dV: keys of a block
constexpr int kQueryTile = 64;               // dK/dV: query rows of a tile (the products' N / K)
constexpr int kQueryBlock = 2 * kGroupRows;  // dQ: query rows of a block
constexpr int kKeyTile = 64;                 // dQ: keys of a tile
constexpr float kLog2e = 1.4426950408889634f;
// Gradients: BF16 outputs of sums over up to T · H/KV terms, against an F64 reference.
constexpr Tolerance kToleranceGrad{"bf16 gradient", 2e-3, 1.0 / 64, 1.0 / 128};

// ---- CPU reference -----------------------------------------------------------------------

// dq, dk, dv in F64 (and o, lse, delta for the kernels' inputs), causal, scale 1/√D.
void backward_cpu(const std::vector<float>& q, const std::vector<float>& k,
                  const std::vector<float>& v, const std::vector<float>& dout,
                  std::vector<double>& o, std::vector<double>& lse, std::vector<double>& delta,
                  std::vector<double>& dq, std::vector<double>& dk, std::vector<double>& dv, int B,
                  int H, int KV, int T) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  std::vector<double> p(T), dp(T);
  std::fill(dk.begin(), dk.end(), 0.0);
  std::fill(dv.begin(), dv.end(), 0.0);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h) {
      const int64_t kv0 = (static_cast<int64_t>(b) * KV + h / (H / KV)) * T;  // K/V row of key 0
      for (int t = 0; t < T; ++t) {
        const int64_t row = (static_cast<int64_t>(b) * H + h) * T + t;
        const float* qr = q.data() + row * D;      // (D)
        const float* dor = dout.data() + row * D;  // (D)
        double mx = -INFINITY;
        for (int s = 0; s <= t; ++s) {
          double dot = 0.0;
          for (int d = 0; d < D; ++d) dot += static_cast<double>(qr[d]) * k[(kv0 + s) * D + d];
          p[s] = dot * scale;
          mx = std::max(mx, p[s]);
        }
        double sum = 0.0;
        for (int s = 0; s <= t; ++s) sum += (p[s] = std::exp(p[s] - mx));
        for (int s = 0; s <= t; ++s) p[s] /= sum;
        lse[row] = mx + std::log(sum);
        double dlt = 0.0;
        for (int d = 0; d < D; ++d) {
          double acc = 0.0;
          for (int s = 0; s <= t; ++s) acc += p[s] * v[(kv0 + s) * D + d];
          o[row * D + d] = acc;
          dlt += acc * dor[d];
        }
        delta[row] = dlt;
        for (int s = 0; s <= t; ++s) {
          double dot = 0.0;
          for (int d = 0; d < D; ++d) dot += static_cast<double>(dor[d]) * v[(kv0 + s) * D + d];
          dp[s] = p[s] * (dot - dlt);  // dS
        }
        for (int d = 0; d < D; ++d) {
          double acc = 0.0;
          for (int s = 0; s <= t; ++s) acc += dp[s] * k[(kv0 + s) * D + d];
          dq[row * D + d] = acc * scale;
        }
        for (int s = 0; s <= t; ++s)
          for (int d = 0; d < D; ++d) {
            dk[(kv0 + s) * D + d] += dp[s] * qr[d] * scale;
            dv[(kv0 + s) * D + d] += p[s] * dor[d];
          }
      }
    }
}

// ---- dK / dV -------------------------------------------------------------------------------

// Shared memory: K and V (kKeyBlock, D), 2 stages of Q and dO (kQueryTile, D) — every tile
// 1,024-byte aligned — then 2 stages of the tile's lse (log2 units) and delta (kQueryTile F32
// each).
constexpr int kKBytes = kKeyBlock * D * 2;
constexpr int kQBytes = kQueryTile * D * 2;
constexpr int kStageBytes = 2 * kQBytes;
constexpr int kRowStatsBytes = 2 * kQueryTile * 4;
constexpr int kDkDvShared = 2 * kKBytes + 2 * kStageBytes + 2 * kRowStatsBytes + 1024;
static_assert(kKBytes % 1024 == 0 && kQBytes % 1024 == 0, "swizzled tiles start 1,024-aligned");

// Grid (T / kKeyBlock, KV, B), kThreads threads, kDkDvShared bytes.
__global__ void __launch_bounds__(kThreads, 1)
    dkdv_v1(const bf16* __restrict__ q, const bf16* __restrict__ k, const bf16* __restrict__ v,
            const bf16* __restrict__ dout, const float* __restrict__ lse,
            const float* __restrict__ delta, bf16* __restrict__ dk, bf16* __restrict__ dv,
            bf16* __restrict__ ds_scratch, int H, int KV, int T, float scale) {
  extern __shared__ uint8_t shared_raw[];
  uint8_t* base = align_to_tiles(shared_raw);
  uint8_t* k_tile = base;
  uint8_t* v_tile = base + kKBytes;
  auto q_tile = [&](int i) { return base + 2 * kKBytes + (i % 2) * kStageBytes; };
  auto do_tile = [&](int i) { return q_tile(i) + kQBytes; };
  auto lse_tile = [&](int i) {
    return reinterpret_cast<float*>(base + 2 * kKBytes + 2 * kStageBytes +
                                    (i % 2) * kRowStatsBytes);
  };
  auto delta_tile = [&](int i) { return lse_tile(i) + kQueryTile; };

  const int key_block = T / kKeyBlock - 1 - static_cast<int>(blockIdx.x);  // longest first
  const int kvh = blockIdx.y, b = blockIdx.z, group_heads = H / KV;
  const int t = threadIdx.x, group = t / kGroupThreads, warp = (t % kGroupThreads) / kWarp;
  const int lane = t % kWarp, g = lane / 4, c = lane % 4;
  const int64_t kv_row0 = (static_cast<int64_t>(b) * KV + kvh) * T + key_block * kKeyBlock;
  const int first_tile = key_block * kKeyBlock / kQueryTile;  // the first queries that see a key
  const int tiles_per_head = T / kQueryTile - first_tile;
  const int steps = group_heads * tiles_per_head;
  // Step n: query head kvh · group_heads + n / tiles_per_head, tile first_tile + n %
  // tiles_per_head.
  auto q_row_of = [&](int n) {
    const int h = kvh * group_heads + n / tiles_per_head;
    return (static_cast<int64_t>(b) * H + h) * T + (first_tile + n % tiles_per_head) * kQueryTile;
  };
  auto load_step = [&](int n) {
    const int64_t row = q_row_of(n);
    load_tile<D>(q_tile(n), q + row * D, kQueryTile, D, t, kThreads);
    load_tile<D>(do_tile(n), dout + row * D, kQueryTile, D, t, kThreads);
    if (t < kQueryTile) {
      lse_tile(n)[t] = lse[row + t] * kLog2e;
      delta_tile(n)[t] = delta[row + t];
    }
  };
  load_tile<D>(k_tile, k + kv_row0 * D, kKeyBlock, D, t, kThreads);
  load_tile<D>(v_tile, v + kv_row0 * D, kKeyBlock, D, t, kThreads);
  load_step(0);
  cp_async_commit();
  if (steps > 1) load_step(1);
  cp_async_commit();

  // This thread's keys (positions): key_pos and key_pos + 8; its queries in a tile:
  // 8·(e / 4) + 2c + e % 2 for accumulator element e.
  const int key_pos = key_block * kKeyBlock + group * kGroupRows + 16 * warp + g;
  const uint8_t* k_group = k_tile + group * kGroupRows * 128;
  const uint8_t* v_group = v_tile + group * kGroupRows * 128;
  float dk_acc[D / 2], dv_acc[D / 2];
#pragma unroll
  for (int e = 0; e < D / 2; ++e) dk_acc[e] = dv_acc[e] = 0.0f;
  const float scale_log2 = scale * kLog2e;

  for (int n = 0; n < steps; ++n) {
    cp_async_wait<1>();
    fence_async_shared();
    __syncthreads();
    const int q0 = (first_tile + n % tiles_per_head) * kQueryTile;  // the tile's first position
    float s[kQueryTile / 2], dp[kQueryTile / 2];  // Sᵀ, dPᵀ (64 keys, kQueryTile queries)
    wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < D / 16; ++ks)
      wgmma_ss_n64<0, 0>(s, descriptor(k_group + ks * 32, 16, 1024),
                         descriptor(q_tile(n) + ks * 32, 16, 1024), ks > 0);
    wgmma_commit();
#pragma unroll
    for (int ks = 0; ks < D / 16; ++ks)
      wgmma_ss_n64<0, 0>(dp, descriptor(v_group + ks * 32, 16, 1024),
                         descriptor(do_tile(n) + ks * 32, 16, 1024), ks > 0);
    wgmma_commit();
    wgmma_wait<1>();
    fence_registers(s);
    const float* lse_n = lse_tile(n);
    const bool masked = q0 < key_block * kKeyBlock + group * kGroupRows + kGroupRows - 1;
#pragma unroll
    for (int e = 0; e < kQueryTile / 2; ++e) {
      const int query = 8 * (e / 4) + 2 * c + e % 2, key = key_pos + 8 * ((e % 4) / 2);
      s[e] = masked && key > q0 + query ? 0.0f : exp2f(s[e] * scale_log2 - lse_n[query]);
    }
    wgmma_wait<0>();
    fence_registers(dp);
    const float* delta_n = delta_tile(n);
#pragma unroll
    for (int e = 0; e < kQueryTile / 2; ++e)
      dp[e] = s[e] * (dp[e] - delta_n[8 * (e / 4) + 2 * c + e % 2]);  // dSᵀ
    uint32_t p_frag[kQueryTile / 16][4], ds_frag[kQueryTile / 16][4];
#pragma unroll
    for (int kk = 0; kk < kQueryTile / 16; ++kk)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        p_frag[kk][i] = pack_bf16(s[8 * kk + 2 * i], s[8 * kk + 2 * i + 1]);
        ds_frag[kk][i] = pack_bf16(dp[8 * kk + 2 * i], dp[8 * kk + 2 * i + 1]);
      }
    fence_registers(dv_acc);
    fence_registers(dk_acc);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kQueryTile / 16; ++kk)
      wgmma_rs_n64<1>(dv_acc, p_frag[kk], descriptor(do_tile(n) + kk * 16 * 128, 64 * 128, 1024),
                      1);
#pragma unroll
    for (int kk = 0; kk < kQueryTile / 16; ++kk)
      wgmma_rs_n64<1>(dk_acc, ds_frag[kk], descriptor(q_tile(n) + kk * 16 * 128, 64 * 128, 1024),
                      1);
    wgmma_commit();
    // dSᵀ to the scratch (B, H, S, T) while the products run: (key, query pair) as BF16 pairs.
    {
      const int h = kvh * group_heads + n / tiles_per_head;
      bf16* ds_head = ds_scratch + (static_cast<int64_t>(b) * H + h) * T * T;  // (S, T)
#pragma unroll
      for (int kk = 0; kk < kQueryTile / 16; ++kk)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int e = 8 * kk + 2 * i, key = key_pos + 8 * ((e % 4) / 2);
          *reinterpret_cast<uint32_t*>(ds_head + static_cast<int64_t>(key) * T + q0 + 8 * (e / 4) +
                                       2 * c) = ds_frag[kk][i];
        }
    }
    wgmma_wait<0>();
    fence_registers(dv_acc);
    fence_registers(dk_acc);
    __syncthreads();  // both warpgroups are done with this stage
    if (n + 2 < steps) load_step(n + 2);
    cp_async_commit();
  }
  const int64_t out_row = kv_row0 + group * kGroupRows + 16 * warp + g;
#pragma unroll
  for (int e = 0; e < D / 2; e += 2) {
    const int r = (e % 4) / 2, col = 8 * (e / 4) + 2 * c;
    *reinterpret_cast<__nv_bfloat162*>(dk + (out_row + 8 * r) * D + col) =
        __floats2bfloat162_rn(dk_acc[e] * scale, dk_acc[e + 1] * scale);
    *reinterpret_cast<__nv_bfloat162*>(dv + (out_row + 8 * r) * D + col) =
        __floats2bfloat162_rn(dv_acc[e], dv_acc[e + 1]);
  }
}

// ---- dQ ------------------------------------------------------------------------------------

// Shared memory: 2 stages of a dSᵀ tile (kKeyTile keys, kQueryBlock queries) and a K tile
// (kKeyTile, D).
constexpr int kDsBytes = kKeyTile * kQueryBlock * 2;
constexpr int kKTileBytes = kKeyTile * D * 2;
constexpr int kDqShared = 2 * (kDsBytes + kKTileBytes) + 1024;
static_assert(kDsBytes % 1024 == 0 && kKTileBytes % 1024 == 0,
              "swizzled tiles start 1,024-aligned");

// Grid (T / kQueryBlock, H, B), kThreads threads, kDqShared bytes.
__global__ void __launch_bounds__(kThreads, 1)
    dq_v1(const bf16* __restrict__ ds_scratch, const bf16* __restrict__ k, bf16* __restrict__ dq,
          int H, int KV, int T, float scale) {
  extern __shared__ uint8_t shared_raw[];
  uint8_t* base = align_to_tiles(shared_raw);
  auto ds_tile = [&](int j) { return base + (j % 2) * (kDsBytes + kKTileBytes); };
  auto k_tile = [&](int j) { return ds_tile(j) + kDsBytes; };
  const int block = T / kQueryBlock - 1 - static_cast<int>(blockIdx.x);
  const int h = blockIdx.y, b = blockIdx.z, kvh = h / (H / KV);
  const int t = threadIdx.x, group = t / kGroupThreads, warp = (t % kGroupThreads) / kWarp;
  const int lane = t % kWarp, g = lane / 4, c = lane % 4;
  const bf16* ds_head = ds_scratch + (static_cast<int64_t>(b) * H + h) * T * T;  // (S, T)
  const bf16* k_head = k + (static_cast<int64_t>(b) * KV + kvh) * T * D;         // (S, D)
  const int tiles = ((block + 1) * kQueryBlock) / kKeyTile;  // keys up to the block's last row
  auto load = [&](int j) {
    // dSᵀ rows j·kKeyTile…, the block's kQueryBlock queries: two 64-column atoms.
    load_tile<kQueryBlock>(ds_tile(j),
                           ds_head + static_cast<int64_t>(j) * kKeyTile * T + block * kQueryBlock,
                           kKeyTile, T, t, kThreads);
    load_tile<D>(k_tile(j), k_head + static_cast<int64_t>(j) * kKeyTile * D, kKeyTile, D, t,
                 kThreads);
  };
  load(0);
  cp_async_commit();
  if (tiles > 1) load(1);
  cp_async_commit();
  float acc[D / 2];
#pragma unroll
  for (int e = 0; e < D / 2; ++e) acc[e] = 0.0f;
  for (int j = 0; j < tiles; ++j) {
    cp_async_wait<1>();
    fence_async_shared();
    __syncthreads();
    // A = dS (queries × keys), stored keys × queries: MN-major; the group's 64 queries are
    // atom `group` of the tile. B = K (keys × D), stored along D: MN-major.
    fence_registers(acc);
    wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < kKeyTile / 16; ++ks)
      wgmma_ss_n64<1, 1>(
          acc,
          descriptor(ds_tile(j) + group * kKeyTile * 128 + ks * 16 * 128, kKeyTile * 128, 1024),
          descriptor(k_tile(j) + ks * 16 * 128, kKeyTile * 128, 1024), 1);
    wgmma_commit();
    wgmma_wait<0>();
    fence_registers(acc);
    __syncthreads();
    if (j + 2 < tiles) load(j + 2);
    cp_async_commit();
  }
  // Keys past a row (inside the diagonal tiles) hold dS = 0 in the scratch (P = 0 there).
  const int64_t out_row = (static_cast<int64_t>(b) * H + h) * T + block * kQueryBlock +
                          group * kGroupRows + 16 * warp + g;
#pragma unroll
  for (int e = 0; e < D / 2; e += 2) {
    const int r = (e % 4) / 2, col = 8 * (e / 4) + 2 * c;
    *reinterpret_cast<__nv_bfloat162*>(dq + (out_row + 8 * r) * D + col) =
        __floats2bfloat162_rn(acc[e] * scale, acc[e + 1] * scale);
  }
}

// ---- host ----------------------------------------------------------------------------------

struct Shape {
  const char* name;
  int B, H, KV, T;
};

struct Buffers {
  bf16 *q, *k, *v, *dout, *dq, *dk, *dv, *ds;
  float *lse, *delta;
};

void launch(const Buffers& m, const Shape& s) {
  static bool configured = false;
  if (!configured) {
    CUDA_CHECK(
        cudaFuncSetAttribute(dkdv_v1, cudaFuncAttributeMaxDynamicSharedMemorySize, kDkDvShared));
    CUDA_CHECK(cudaFuncSetAttribute(dq_v1, cudaFuncAttributeMaxDynamicSharedMemorySize, kDqShared));
    configured = true;
  }
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  dkdv_v1<<<dim3(s.T / kKeyBlock, s.KV, s.B), kThreads, kDkDvShared>>>(
      m.q, m.k, m.v, m.dout, m.lse, m.delta, m.dk, m.dv, m.ds, s.H, s.KV, s.T, scale);
  dq_v1<<<dim3(s.T / kQueryBlock, s.H, s.B), kThreads, kDqShared>>>(m.ds, m.k, m.dq, s.H, s.KV, s.T,
                                                                    scale);
}

template <class T>
T* device_copy(const std::vector<T>& host) {
  T* p = nullptr;
  CUDA_CHECK(cudaMalloc(&p, host.size() * sizeof(T)));
  CUDA_CHECK(cudaMemcpy(p, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
  return p;
}

std::vector<float> download_bf16(const bf16* p, int64_t n) {
  std::vector<bf16> host(n);
  CUDA_CHECK(cudaMemcpy(host.data(), p, n * 2, cudaMemcpyDeviceToHost));
  return to_float(host);
}

bool run_shape(const Shape& s, bool check) {
  const int64_t nq = static_cast<int64_t>(s.B) * s.H * s.T * D,
                nk = static_cast<int64_t>(s.B) * s.KV * s.T * D,
                rows = static_cast<int64_t>(s.B) * s.H * s.T;
  const auto q = random_bf16(nq, 31), k = random_bf16(nk, 32), v = random_bf16(nk, 33),
             dout = random_bf16(nq, 34);
  // lse and delta: the reference's (a check) or the same formulas in F32 for timing shapes,
  // where the F64 reference would take minutes: there the values only need to be realistic.
  std::vector<float> lse(rows), delta(rows);
  std::vector<double> o(check ? nq : 0), lse_ref(check ? rows : 0), delta_ref(check ? rows : 0),
      dq_ref(check ? nq : 0), dk_ref(check ? nk : 0), dv_ref(check ? nk : 0);
  if (check) {
    backward_cpu(to_float(q), to_float(k), to_float(v), to_float(dout), o, lse_ref, delta_ref,
                 dq_ref, dk_ref, dv_ref, s.B, s.H, s.KV, s.T);
    for (int64_t i = 0; i < rows; ++i) {
      lse[i] = static_cast<float>(lse_ref[i]);
      delta[i] = static_cast<float>(delta_ref[i]);
    }
  } else {
    for (int64_t i = 0; i < rows; ++i) {
      const int t = static_cast<int>(i % s.T);
      lse[i] = std::log(static_cast<float>(t + 1));  // about a uniform row's
      delta[i] = 0.01f;
    }
  }
  Buffers m{};
  m.q = device_copy(q);
  m.k = device_copy(k);
  m.v = device_copy(v);
  m.dout = device_copy(dout);
  m.lse = device_copy(lse);
  m.delta = device_copy(delta);
  CUDA_CHECK(cudaMalloc(&m.dq, nq * 2));
  CUDA_CHECK(cudaMalloc(&m.dk, nk * 2));
  CUDA_CHECK(cudaMalloc(&m.dv, nk * 2));
  CUDA_CHECK(cudaMalloc(&m.ds, rows * s.T * 2));
  poison_nan(m.dq, nq * 2);
  poison_nan(m.dk, nk * 2);
  poison_nan(m.dv, nk * 2);
  poison_nan(m.ds, rows * s.T * 2);  // only entries the dQ kernel never reads stay NaN
  bool ok = true;
  if (check) {
    launch(m, s);
    CUDA_CHECK(cudaGetLastError());
    CUDA_CHECK(cudaDeviceSynchronize());
    const auto dq = download_bf16(m.dq, nq), dk = download_bf16(m.dk, nk),
               dv = download_bf16(m.dv, nk);
    const auto cq = compare("dq", dq.data(), dq_ref.data(), nq, kToleranceGrad);
    const auto ck = compare("dk", dk.data(), dk_ref.data(), nk, kToleranceGrad);
    const auto cv = compare("dv", dv.data(), dv_ref.data(), nk, kToleranceGrad);
    ok = cq.ok && ck.ok && cv.ok;
    std::printf("check %-22s dq rel L2 %.3g  dk %.3g  dv %.3g  (max |err| %.3g %.3g %.3g)  %s\n",
                s.name, cq.rel_l2, ck.rel_l2, cv.rel_l2, cq.max_abs, ck.max_abs, cv.max_abs,
                ok ? "ok" : "FAIL");
  } else {
    const double us = median_launch_us([&](int) { launch(m, s); }, 3, 3, 15);
    // Five products (S, dP, dV, dK, dQ), each 2·T·S·D/2 FLOPs a head under the causal mask.
    const double flops = 5.0 * 2.0 * s.B * s.H * static_cast<double>(s.T) * s.T * D / 2.0;
    const double bytes = 2.0 * (4 * nq + 4 * nk) + 8.0 * rows;
    std::printf("bench %-22s v1 ", s.name);
    print_napkin(napkin(us, bytes, flops));
    std::printf("\n");
  }
  for (void* p : {static_cast<void*>(m.q), static_cast<void*>(m.k), static_cast<void*>(m.v),
                  static_cast<void*>(m.dout), static_cast<void*>(m.dq), static_cast<void*>(m.dk),
                  static_cast<void*>(m.dv), static_cast<void*>(m.ds), static_cast<void*>(m.lse),
                  static_cast<void*>(m.delta)})
    CUDA_CHECK(cudaFree(p));
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  const char* program = "flash_wgmma_backward";
  const std::string mode = argc >= 2 ? argv[1] : "all";
  if (argc > 2 || (mode != "check" && mode != "bench" && mode != "all")) {
    std::fprintf(stderr, "usage: %s [check|bench|all]\n", argv[0]);
    return 2;
  }
  require_device(program);
  require_kernel_image(program, dq_v1);
  bool ok = true;
  // Small shapes against the CPU: GQA groups of 2 and 1, several key and query blocks.
  const Shape checks[] = {{"B1 H4 KV2 T384 D64", 1, 4, 2, 384},
                          {"B2 H2 KV2 T256 D64", 2, 2, 2, 256}};
  if (mode == "check" || mode == "all")
    for (const Shape& s : checks) ok = run_shape(s, true) && ok;
  // The issue's first training shape (SDPA's backward there: docs/optimization-log.md).
  if ((mode == "bench" || mode == "all") && ok)
    run_shape({"B8 H14 KV2 T1024 D64", 8, 14, 2, 1024}, false);
  std::printf(ok ? "all checks passed\n" : "CHECK FAILED\n");
  return ok ? 0 : 1;
}
