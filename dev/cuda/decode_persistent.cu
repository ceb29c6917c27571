// Lab: a persistent decode kernel for one token at batch 1 (Qwen2.5-0.5B shape, 24 layers,
// BF16 weights, F32 activations). One cooperative grid of one block per SM runs every layer's
// five phases with a grid barrier between them:
//   P1 norm + QKV (+ bias)    P2 attention (RoPE on q and the new k, cache append)
//   P3 O + residual           P4 norm + gate/up + SwiGLU      P5 down + residual
// Block b owns a contiguous range of output rows in every phase, so its rows of a weight
// matrix are one or two contiguous byte ranges. Variant 1 reads them from global memory when
// the phase runs (a kernel chain's access pattern, without its launches). Variant 2 copies them
// into shared memory (cp.async, 16 bytes a thread) as soon as the buffer is free, phases
// ahead: the QKV rows of the next layer during O, the O rows during gate/up, the gate/up rows
// during down, the down rows during the next QKV; every phase waits only for its own group
// (cp.async.wait_group 2), so DRAM streams weights while the latency-bound phases (attention,
// barriers) run. The question: how close does variant 2 come to the bytes' time at 4 TB/s
// (30 MB a layer, 7.4 µs), against the fused five-kernel layer's ~24 µs in the CUDA-graph
// step (docs/optimization-log.md)?
//
// The four buffers need 231,168 bytes of shared memory with 132 blocks: the lab runs only on
// a GPU of at least 132 SMs with 227 KB per block (the H200). A CPU reference (F64 sums of the
// same BF16 weights, the normalized rows rounded to BF16 as the GPU keeps them) checks the
// residual stream after all layers.
//
// Limits of the measurement: attention runs on 14 blocks (one per query head), each warp
// walking its keys one after another, so at long contexts the token time is mostly that
// loop's latency (a split over the context with a combine would be the engine's design);
// in P1, P3 and P5 a block owns fewer rows (6–9) than it has warps (16), so part of each
// block idles and variant 1 keeps fewer bytes in flight than a kernel chain's GEMV would.
//
//   ./dev/cuda/build/decode_persistent [1|2|all] [context]   (default: all, 8)
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "common.h"

namespace {

using bf16 = __nv_bfloat16;

constexpr int kC = 896, kH = 14, kHkv = 2, kD = 64, kF = 4864, kLayers = 24;
constexpr int kQkvRows = (kH + 2 * kHkv) * kD;  // 1152
constexpr int kThreads = 512, kWarps = kThreads / 32;
constexpr float kEps = 1e-6f, kTheta = 1e6f;

struct Layer {
  const bf16* qkv;        // (1152, C)
  const float* qkv_bias;  // (1152)
  const bf16* o;          // (C, H·D)
  const bf16* gate_up;    // (2F, C): gate rows, then up rows
  const bf16* down;       // (C, F)
  const float* norm1;     // (C)
  const float* norm2;     // (C)
  bf16* k_cache;          // (positions, Hkv, D)
  bf16* v_cache;
};

struct Params {
  const Layer* layers;
  float* x;           // (C) residual stream
  float* qkv;         // (1152) projection output
  float* attn;        // (H·D)
  float* act;         // (F)
  unsigned* barrier;  // {arrived, generation}
  int pos;            // the new token's position: keys [0, pos) are in the cache
  int stage;          // variant 2: weights staged in shared memory phases ahead
};

// Rows [first, last) of R that block b of G owns.
__host__ __device__ inline int range_first(int R, int b, int G) {
  return static_cast<int>(static_cast<int64_t>(R) * b / G);
}

// Shared memory: the normalized row, then the QKV, O, gate/up and down buffers.
struct Smem {
  int qkv_rows, o_rows, pairs, down_rows;
  size_t xs, qkv, o, gate_up, down, total;
};
__host__ __device__ inline Smem smem_plan(int G) {
  Smem s;
  s.qkv_rows = (kQkvRows + G - 1) / G;
  s.o_rows = (kC + G - 1) / G;
  s.pairs = (kF + G - 1) / G;
  s.down_rows = (kC + G - 1) / G;
  s.xs = 0;
  s.qkv = s.xs + kC * sizeof(bf16);
  s.o = s.qkv + static_cast<size_t>(s.qkv_rows) * kC * sizeof(bf16);
  s.gate_up = s.o + static_cast<size_t>(s.o_rows) * kH * kD * sizeof(bf16);
  s.down = s.gate_up + static_cast<size_t>(2 * s.pairs) * kC * sizeof(bf16);
  s.total = s.down + static_cast<size_t>(s.down_rows) * kF * sizeof(bf16);
  return s;
}

__device__ void grid_barrier(unsigned* barrier) {
  __syncthreads();
  if (threadIdx.x == 0) {
    volatile unsigned* generation = barrier + 1;
    const unsigned seen = *generation;
    __threadfence();
    if (atomicAdd(barrier, 1u) == gridDim.x - 1) {
      barrier[0] = 0;
      __threadfence();
      atomicAdd(barrier + 1, 1u);
    } else {
      while (*generation == seen) {
      }
    }
    __threadfence();
  }
  __syncthreads();
}

// Copies `bytes` (a multiple of 16) from global to shared memory, 16 bytes a thread.
__device__ void stage_copy(void* dst, const void* src, size_t bytes) {
  const auto s = static_cast<uint32_t>(__cvta_generic_to_shared(dst));
  const char* g = static_cast<const char*>(src);
  for (size_t i = threadIdx.x * 16; i < bytes; i += kThreads * 16)
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(s + static_cast<uint32_t>(i)),
                 "l"(g + i)
                 : "memory");
}
__device__ void stage_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
__device__ void stage_wait() {  // all but the two most recent groups are complete
  asm volatile("cp.async.wait_group 2;" ::: "memory");
  __syncthreads();
}

__device__ float warp_sum(float v) {
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ void add8_bf16(float& s, const uint4& w, const uint4& x) {
  const bf16* a = reinterpret_cast<const bf16*>(&w);
  const bf16* b = reinterpret_cast<const bf16*>(&x);
#pragma unroll
  for (int i = 0; i < 8; ++i) s = fmaf(__bfloat162float(a[i]), __bfloat162float(b[i]), s);
}
__device__ void add8_f32(float& s, const uint4& w, const float* v) {
  const bf16* a = reinterpret_cast<const bf16*>(&w);
  const float4 v0 = __ldcg(reinterpret_cast<const float4*>(v));
  const float4 v1 = __ldcg(reinterpret_cast<const float4*>(v) + 1);
  const float b[8] = {v0.x, v0.y, v0.z, v0.w, v1.x, v1.y, v1.z, v1.w};
#pragma unroll
  for (int i = 0; i < 8; ++i) s = fmaf(__bfloat162float(a[i]), b[i], s);
}

// A 16-byte weight load: streaming from global memory, or from shared memory. A template
// parameter, so the unrolled loops below issue their loads back to back (a run-time choice
// put each load behind its own branch).
template <bool kGlobal>
__device__ __forceinline__ uint4 load_w(const uint4* w) {
  if constexpr (kGlobal) return __ldcs(w);
  return *w;
}
// The warp's dot of one weight row (K BF16, shared or global) with the normalized row xs.
template <bool kGlobal>
__device__ float dot_xs(const bf16* row, const bf16* xs, int K) {
  const uint4* w = reinterpret_cast<const uint4*>(row);
  const uint4* x = reinterpret_cast<const uint4*>(xs);
  float s = 0.0f;
#pragma unroll 4
  for (int c = threadIdx.x % 32; c < K / 8; c += 32) add8_bf16(s, load_w<kGlobal>(w + c), x[c]);
  return warp_sum(s);
}
// The same with an F32 vector in global memory (written by the previous phase).
template <bool kGlobal>
__device__ float dot_vec(const bf16* row, const float* v, int K) {
  const uint4* w = reinterpret_cast<const uint4*>(row);
  float s = 0.0f;
#pragma unroll 4
  for (int c = threadIdx.x % 32; c < K / 8; c += 32) add8_f32(s, load_w<kGlobal>(w + c), v + 8 * c);
  return warp_sum(s);
}
__device__ float dot_xs(const bf16* row, const bf16* xs, int K, bool from_global) {
  return from_global ? dot_xs<true>(row, xs, K) : dot_xs<false>(row, xs, K);
}
__device__ float dot_vec(const bf16* row, const float* v, int K, bool from_global) {
  return from_global ? dot_vec<true>(row, v, K) : dot_vec<false>(row, v, K);
}

// xs = bf16(x · rsqrt(mean(x²) + eps) · g), computed by the whole block.
__device__ void normalize(const float* x, const float* g, bf16* xs, float* scratch) {
  float s = 0.0f;
  for (int i = threadIdx.x; i < kC; i += kThreads) {
    const float v = __ldcg(x + i);
    s += v * v;
  }
  s = warp_sum(s);
  if (threadIdx.x % 32 == 0) scratch[threadIdx.x / 32] = s;
  __syncthreads();
  float total = 0.0f;
  for (int w = 0; w < kWarps; ++w) total += scratch[w];
  const float r = rsqrtf(total / kC + kEps);
  for (int i = threadIdx.x; i < kC; i += kThreads)
    xs[i] = __float2bfloat16(__ldcg(x + i) * r * g[i]);
  __syncthreads();
}

// Issues the copies of layer l's buffer `which` (0 QKV, 1 O, 2 gate/up, 3 down) for block b.
__device__ void stage_layer(const Params& p, const Smem& m, char* smem, int l, int which) {
  const int b = blockIdx.x, G = gridDim.x;
  if (l < kLayers) {
    const Layer& L = p.layers[l];
    if (which == 0) {
      const int r0 = range_first(kQkvRows, b, G), r1 = range_first(kQkvRows, b + 1, G);
      stage_copy(smem + m.qkv, L.qkv + static_cast<size_t>(r0) * kC, (r1 - r0) * kC * sizeof(bf16));
    } else if (which == 1) {
      const int r0 = range_first(kC, b, G), r1 = range_first(kC, b + 1, G);
      stage_copy(smem + m.o, L.o + static_cast<size_t>(r0) * kH * kD,
                 (r1 - r0) * kH * kD * sizeof(bf16));
    } else if (which == 2) {
      const int a0 = range_first(kF, b, G), a1 = range_first(kF, b + 1, G);
      const size_t half = static_cast<size_t>(a1 - a0) * kC;
      stage_copy(smem + m.gate_up, L.gate_up + static_cast<size_t>(a0) * kC, half * sizeof(bf16));
      stage_copy(smem + m.gate_up + half * sizeof(bf16),
                 L.gate_up + static_cast<size_t>(kF + a0) * kC, half * sizeof(bf16));
    } else {
      const int r0 = range_first(kC, b, G), r1 = range_first(kC, b + 1, G);
      stage_copy(smem + m.down, L.down + static_cast<size_t>(r0) * kF,
                 (r1 - r0) * kF * sizeof(bf16));
    }
  }
  stage_commit();  // also when empty: every phase waits with the same group count
}

__global__ void __launch_bounds__(kThreads, 1) decode_kernel(Params p) {
  extern __shared__ __align__(16) char smem[];
  __shared__ float scratch[kWarps];
  const Smem m = smem_plan(gridDim.x);
  const int b = blockIdx.x, G = gridDim.x, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  bf16* xs = reinterpret_cast<bf16*>(smem + m.xs);
  const bool staged = p.stage != 0;
  const bool global = !staged;
  if (staged) {
    stage_layer(p, m, smem, 0, 0);
    stage_layer(p, m, smem, 0, 1);
    stage_layer(p, m, smem, 0, 2);
  }
  for (int l = 0; l < kLayers; ++l) {
    const Layer& L = p.layers[l];
    // P1: norm + QKV.
    if (staged) {
      stage_wait();                   // QKV of layer l
      stage_layer(p, m, smem, l, 3);  // down of layer l
    }
    normalize(p.x, L.norm1, xs, scratch);
    {
      const int r0 = range_first(kQkvRows, b, G), r1 = range_first(kQkvRows, b + 1, G);
      for (int r = r0 + warp; r < r1; r += kWarps) {
        const bf16* row =
            staged ? reinterpret_cast<const bf16*>(smem + m.qkv) + static_cast<size_t>(r - r0) * kC
                   : L.qkv + static_cast<size_t>(r) * kC;
        const float y = dot_xs(row, xs, kC, global);
        if (lane == 0) p.qkv[r] = y + L.qkv_bias[r];
      }
    }
    grid_barrier(p.barrier);
    // P2: attention, one block per query head; the QKV buffer is free, its space the scratch.
    if (b < kH) {
      const int h = b, kv = h / (kH / kHkv);
      const float inv = powf(kTheta, -2.0f * lane / kD), angle = p.pos * inv;
      float sn, cs;
      sincosf(angle, &sn, &cs);
      auto rope = [&](const float* v, float& a, float& c) {
        const float x0 = __ldcg(v + lane), x1 = __ldcg(v + lane + 32);
        a = x0 * cs - x1 * sn;
        c = x1 * cs + x0 * sn;
      };
      float q0, q1, k0, k1;
      rope(p.qkv + h * kD, q0, q1);
      rope(p.qkv + (kH + kv) * kD, k0, k1);
      const float v0 = __ldcg(p.qkv + (kH + kHkv + kv) * kD + lane);
      const float v1 = __ldcg(p.qkv + (kH + kHkv + kv) * kD + lane + 32);
      const float scale = rsqrtf(static_cast<float>(kD));
      float mx = -INFINITY, sum = 0.0f, o0 = 0.0f, o1 = 0.0f;
      // Key j's k and v: the cache's, or the new token's (j = pos). The loop loads key
      // j + kWarps before it works on key j, so each step's loads overlap the previous maths.
      const bf16* const kc = L.k_cache;
      const bf16* const vc = L.v_cache;
      auto key = [&](int j, float& a0, float& a1, float& b0, float& b1) {
        if (j < p.pos) {
          const size_t at = (static_cast<size_t>(j) * kHkv + kv) * kD;
          a0 = __bfloat162float(kc[at + lane]);
          a1 = __bfloat162float(kc[at + lane + 32]);
          b0 = __bfloat162float(vc[at + lane]);
          b1 = __bfloat162float(vc[at + lane + 32]);
        } else {
          a0 = k0, a1 = k1, b0 = v0, b1 = v1;
        }
      };
      float nk0 = 0.0f, nk1 = 0.0f, nv0 = 0.0f, nv1 = 0.0f;
      if (warp <= p.pos) key(warp, nk0, nk1, nv0, nv1);
      for (int j = warp; j <= p.pos; j += kWarps) {
        const float kj0 = nk0, kj1 = nk1, vj0 = nv0, vj1 = nv1;
        if (j + kWarps <= p.pos) key(j + kWarps, nk0, nk1, nv0, nv1);
        const float s = warp_sum(q0 * kj0 + q1 * kj1) * scale;
        const float nm = fmaxf(mx, s), old = expf(mx - nm), e = expf(s - nm);
        sum = sum * old + e;
        o0 = o0 * old + e * vj0;
        o1 = o1 * old + e * vj1;
        mx = nm;
      }
      float* part = reinterpret_cast<float*>(smem + m.qkv);  // (warps, 2 + D)
      part[warp * (kD + 2) + 2 + lane] = o0;
      part[warp * (kD + 2) + 2 + lane + 32] = o1;
      if (lane == 0) {
        part[warp * (kD + 2)] = mx;
        part[warp * (kD + 2) + 1] = sum;
      }
      __syncthreads();
      if (warp == 0) {
        float M = -INFINITY;
        for (int w = 0; w < kWarps; ++w) M = fmaxf(M, part[w * (kD + 2)]);
        float total = 0.0f, a0 = 0.0f, a1 = 0.0f;
        for (int w = 0; w < kWarps; ++w) {
          const float mw = part[w * (kD + 2)];
          if (mw == -INFINITY) continue;  // a warp without keys
          const float f = expf(mw - M);
          total += part[w * (kD + 2) + 1] * f;
          a0 += part[w * (kD + 2) + 2 + lane] * f;
          a1 += part[w * (kD + 2) + 2 + lane + 32] * f;
        }
        p.attn[h * kD + lane] = a0 / total;
        p.attn[h * kD + lane + 32] = a1 / total;
        if (h % (kH / kHkv) == 0) {  // the group's first head appends the new key and value
          const size_t at = (static_cast<size_t>(p.pos) * kHkv + kv) * kD;
          L.k_cache[at + lane] = __float2bfloat16(k0);
          L.k_cache[at + lane + 32] = __float2bfloat16(k1);
          L.v_cache[at + lane] = __float2bfloat16(v0);
          L.v_cache[at + lane + 32] = __float2bfloat16(v1);
        }
      }
    }
    grid_barrier(p.barrier);
    // P3: O + residual.
    if (staged) {
      stage_wait();                       // O of layer l
      stage_layer(p, m, smem, l + 1, 0);  // QKV of layer l + 1
    }
    {
      const int r0 = range_first(kC, b, G), r1 = range_first(kC, b + 1, G);
      for (int r = r0 + warp; r < r1; r += kWarps) {
        const bf16* row = staged ? reinterpret_cast<const bf16*>(smem + m.o) +
                                       static_cast<size_t>(r - r0) * kH * kD
                                 : L.o + static_cast<size_t>(r) * kH * kD;
        const float y = dot_vec(row, p.attn, kH * kD, global);
        if (lane == 0) p.x[r] += y;
      }
    }
    grid_barrier(p.barrier);
    // P4: norm + gate/up + SwiGLU.
    if (staged) {
      stage_wait();                       // gate/up of layer l
      stage_layer(p, m, smem, l + 1, 1);  // O of layer l + 1
    }
    normalize(p.x, L.norm2, xs, scratch);
    {
      const int a0 = range_first(kF, b, G), a1 = range_first(kF, b + 1, G);
      const bf16* base = reinterpret_cast<const bf16*>(smem + m.gate_up);
      for (int a = a0 + warp; a < a1; a += kWarps) {
        const bf16* gate = staged ? base + static_cast<size_t>(a - a0) * kC
                                  : L.gate_up + static_cast<size_t>(a) * kC;
        const bf16* up = staged ? base + static_cast<size_t>(a1 - a0 + a - a0) * kC
                                : L.gate_up + static_cast<size_t>(kF + a) * kC;
        const float g = dot_xs(gate, xs, kC, global), u = dot_xs(up, xs, kC, global);
        if (lane == 0) p.act[a] = g / (1.0f + expf(-g)) * u;
      }
    }
    grid_barrier(p.barrier);
    // P5: down + residual.
    if (staged) {
      stage_wait();                       // down of layer l
      stage_layer(p, m, smem, l + 1, 2);  // gate/up of layer l + 1
    }
    {
      const int r0 = range_first(kC, b, G), r1 = range_first(kC, b + 1, G);
      for (int r = r0 + warp; r < r1; r += kWarps) {
        const bf16* row =
            staged ? reinterpret_cast<const bf16*>(smem + m.down) + static_cast<size_t>(r - r0) * kF
                   : L.down + static_cast<size_t>(r) * kF;
        const float y = dot_vec(row, p.act, kF, global);
        if (lane == 0) p.x[r] += y;
      }
    }
    grid_barrier(p.barrier);
  }
  if (staged) asm volatile("cp.async.wait_all;" ::: "memory");
}

// ---- the CPU reference --------------------------------------------------------------------

struct HostLayer {
  std::vector<bf16> qkv, o, gate_up, down, k_cache, v_cache;
  std::vector<float> qkv_bias, norm1, norm2;
};

float bf(bf16 v) { return __bfloat162float(v); }

void normalize_host(const std::vector<double>& x, const std::vector<float>& g,
                    std::vector<float>& xs) {
  double s = 0.0;
  for (double v : x) s += v * v;
  const double r = 1.0 / std::sqrt(s / kC + kEps);
  for (int i = 0; i < kC; ++i) xs[i] = bf(__float2bfloat16(static_cast<float>(x[i] * r * g[i])));
}

std::vector<double> reference(const std::vector<HostLayer>& layers, std::vector<float> x0,
                              int pos) {
  std::vector<double> x(x0.begin(), x0.end()), qkv(kQkvRows), attn(kH * kD), act(kF);
  std::vector<float> xs(kC);
  auto dot = [](const bf16* w, const auto& v, int K) {
    double s = 0.0;
    for (int i = 0; i < K; ++i) s += static_cast<double>(bf(w[i])) * v[i];
    return s;
  };
  for (const HostLayer& L : layers) {
    normalize_host(x, L.norm1, xs);
    for (int r = 0; r < kQkvRows; ++r)
      qkv[r] = dot(&L.qkv[static_cast<size_t>(r) * kC], xs, kC) + L.qkv_bias[r];
    auto rope = [&](int at, int i, double& a, double& c) {
      const double angle = pos * std::pow(static_cast<double>(kTheta), -2.0 * i / kD);
      a = qkv[at + i] * std::cos(angle) - qkv[at + i + 32] * std::sin(angle);
      c = qkv[at + i + 32] * std::cos(angle) + qkv[at + i] * std::sin(angle);
    };
    for (int h = 0; h < kH; ++h) {
      const int kv = h / (kH / kHkv);
      std::vector<double> q(kD), knew(kD);
      for (int i = 0; i < 32; ++i) {
        rope(h * kD, i, q[i], q[i + 32]);
        rope((kH + kv) * kD, i, knew[i], knew[i + 32]);
      }
      std::vector<double> s(pos + 1);
      double mx = -INFINITY;
      for (int j = 0; j <= pos; ++j) {
        double d = 0.0;
        for (int i = 0; i < kD; ++i)
          d += q[i] *
               (j < pos ? bf(L.k_cache[(static_cast<size_t>(j) * kHkv + kv) * kD + i]) : knew[i]);
        s[j] = d / std::sqrt(static_cast<double>(kD));
        mx = std::max(mx, s[j]);
      }
      double total = 0.0;
      for (double& v : s) total += (v = std::exp(v - mx));
      for (int i = 0; i < kD; ++i) {
        double o = 0.0;
        for (int j = 0; j <= pos; ++j)
          o += s[j] * (j < pos ? bf(L.v_cache[(static_cast<size_t>(j) * kHkv + kv) * kD + i])
                               : qkv[(kH + kHkv + kv) * kD + i]);
        attn[h * kD + i] = o / total;
      }
    }
    for (int r = 0; r < kC; ++r) x[r] += dot(&L.o[static_cast<size_t>(r) * kH * kD], attn, kH * kD);
    normalize_host(x, L.norm2, xs);
    for (int a = 0; a < kF; ++a) {
      const double g = dot(&L.gate_up[static_cast<size_t>(a) * kC], xs, kC);
      const double u = dot(&L.gate_up[static_cast<size_t>(kF + a) * kC], xs, kC);
      act[a] = g / (1.0 + std::exp(-g)) * u;
    }
    for (int r = 0; r < kC; ++r) x[r] += dot(&L.down[static_cast<size_t>(r) * kF], act, kF);
  }
  return x;
}

template <class T>
T* upload(const std::vector<T>& v) {
  T* d = nullptr;
  CUDA_CHECK(cudaMalloc(&d, v.size() * sizeof(T)));
  CUDA_CHECK(cudaMemcpy(d, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
  return d;
}

std::vector<float> random_f32(size_t n, uint64_t seed, float lo, float hi) {
  lab::Rng rng(seed);
  std::vector<float> v(n);
  for (float& e : v) e = rng.uniform(lo, hi);
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  const cudaDeviceProp prop = lab::require_device("decode_persistent");
  lab::require_kernel_image("decode_persistent", decode_kernel);
  const std::string which = argc > 1 ? argv[1] : "all";
  const int pos = argc > 2 ? std::atoi(argv[2]) : 8;
  if (which != "all" && which != "1" && which != "2") {
    std::fprintf(stderr, "decode_persistent: variant must be 1, 2 or all, found '%s'\n",
                 which.c_str());
    return 2;
  }
  const int G = prop.multiProcessorCount;
  const Smem m = smem_plan(G);
  cudaFuncAttributes attributes{};
  CUDA_CHECK(cudaFuncGetAttributes(&attributes, decode_kernel));
  const size_t smem_needed = m.total + attributes.sharedSizeBytes;  // dynamic + static
  if (G < 132 || smem_needed > prop.sharedMemPerBlockOptin || pos < 1 || pos > 8191) {
    std::fprintf(stderr,
                 "decode_persistent: needs ≥ 132 SMs and %zu bytes of shared memory a block "
                 "(found %d SMs, %zu bytes) and a context in [1, 8191]\n",
                 smem_needed, G, static_cast<size_t>(prop.sharedMemPerBlockOptin));
    return 2;
  }
  const int positions = pos + 1;
  // Weights scaled by 1/sqrt(K) so every layer's outputs stay near 1.
  const float sc = 1.0f / std::sqrt(static_cast<float>(kC)),
              sf = 1.0f / std::sqrt(static_cast<float>(kF));
  std::vector<HostLayer> host(kLayers);
  std::vector<Layer> dev(kLayers);
  double weight_bytes = 0.0;
  for (int l = 0; l < kLayers; ++l) {
    HostLayer& h = host[l];
    const uint64_t s = 1000 + 10 * l;
    h.qkv = lab::random_bf16(static_cast<size_t>(kQkvRows) * kC, s, -sc, sc);
    h.o = lab::random_bf16(static_cast<size_t>(kC) * kH * kD, s + 1, -sc, sc);
    h.gate_up = lab::random_bf16(static_cast<size_t>(2 * kF) * kC, s + 2, -sc, sc);
    h.down = lab::random_bf16(static_cast<size_t>(kC) * kF, s + 3, -sf, sf);
    h.k_cache = lab::random_bf16(static_cast<size_t>(positions) * kHkv * kD, s + 4);
    h.v_cache = lab::random_bf16(static_cast<size_t>(positions) * kHkv * kD, s + 5);
    h.qkv_bias = random_f32(kQkvRows, s + 6, -0.1f, 0.1f);
    h.norm1 = random_f32(kC, s + 7, 0.5f, 1.5f);
    h.norm2 = random_f32(kC, s + 8, 0.5f, 1.5f);
    dev[l] = {upload(h.qkv),     upload(h.qkv_bias), upload(h.o),
              upload(h.gate_up), upload(h.down),     upload(h.norm1),
              upload(h.norm2),   upload(h.k_cache),  upload(h.v_cache)};
    weight_bytes += 2.0 * (h.qkv.size() + h.o.size() + h.gate_up.size() + h.down.size());
  }
  const std::vector<float> x0 = random_f32(kC, 7, -1.0f, 1.0f);
  Params p{};
  p.layers = upload(dev);
  p.x = upload(x0);
  CUDA_CHECK(cudaMalloc(&p.qkv, kQkvRows * sizeof(float)));
  CUDA_CHECK(cudaMalloc(&p.attn, kH * kD * sizeof(float)));
  CUDA_CHECK(cudaMalloc(&p.act, kF * sizeof(float)));
  CUDA_CHECK(cudaMalloc(&p.barrier, 2 * sizeof(unsigned)));
  CUDA_CHECK(cudaMemset(p.barrier, 0, 2 * sizeof(unsigned)));
  p.pos = pos;
  CUDA_CHECK(cudaFuncSetAttribute(decode_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  static_cast<int>(m.total)));
  int per_sm = 0;
  CUDA_CHECK(
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, decode_kernel, kThreads, m.total));
  if (per_sm < 1) {
    std::fprintf(stderr, "decode_persistent: the kernel does not fit an SM\n");
    return 2;
  }
  const std::vector<double> want = reference(host, x0, pos);
  std::printf(
      "Qwen2.5-0.5B shape, %d layers, batch 1, context %d: %.1f MB of weights a token, %d blocks\n",
      kLayers, pos, weight_bytes / 1e6, G);
  int failures = 0;
  for (int variant : {1, 2}) {
    if (which != "all" && std::atoi(which.c_str()) != variant) continue;
    p.stage = variant == 2;
    auto launch = [&] {
      void* args[] = {&p};
      CUDA_CHECK(cudaLaunchCooperativeKernel(reinterpret_cast<void*>(decode_kernel), dim3(G),
                                             dim3(kThreads), args, m.total, nullptr));
    };
    CUDA_CHECK(cudaMemcpy(p.x, x0.data(), kC * sizeof(float), cudaMemcpyHostToDevice));
    launch();
    CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<float> got(kC);
    CUDA_CHECK(cudaMemcpy(got.data(), p.x, kC * sizeof(float), cudaMemcpyDeviceToHost));
    // F32 sums in another order than the reference's F64 ones round the normalized rows to
    // other BF16 values now and then; over 48 norms that reaches 1e-3 relative L2 (a host
    // emulation of the kernel: 2e-5 to 1.7e-3 over summation orders), while a wrong rope
    // pairing, a missing row or a stale buffer gives errors near 1e-1.
    const lab::Tolerance tol{"f32 chain", 1e-2, 1e-2, 5e-3};
    const lab::Comparison c = lab::compare("x", got.data(), want.data(), kC, tol);
    failures += !c.ok;
    // Ten tokens back to back per sample (the residual stream drifts, the work does not),
    // so the host's cooperative-launch cost overlaps the previous token.
    const double t = lab::median_launch_us([&](int) { launch(); }, 10, 3, 30);
    std::printf(
        "variant %d (%s): %s (rel L2 %.2e), %.1f us a token, %.2f us a layer, %.2f TB/s "
        "of weights\n",
        variant, variant == 1 ? "weights read in their phase" : "weights staged phases ahead",
        c.ok ? "ok" : "WRONG", c.rel_l2, t, t / kLayers, weight_bytes / t / 1e6);
  }
  return failures == 0 ? 0 : 1;
}
