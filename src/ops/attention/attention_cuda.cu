// CUDA reference attention: materialized scores and probabilities, F32 arithmetic.
// Reference: Vaswani et al. 2017 (scaled dot-product attention); GQA as in Ainslie et al.
// 2023; semantics of torch.nn.functional.scaled_dot_product_attention with enable_gqa.
//
// The straightforward kernel that the flash kernel will later replace behind the same
// interface; memory is O(B·H·T·S) for the saved probabilities (and the backward's dS).
//   forward:  S = Q·Kᵀ·scale, masked; P = softmax(S); O = P·V
//   backward: dP = dO·Vᵀ; dS = P·(dP − Σ_j P·dP)·scale; dQ = dS·K;
//             dK = dSᵀ·Q and dV = Pᵀ·dO, summed over the group's heads and queries in order
// Layout: q, out, dq (B,H,T,D); k, v, dk, dv (B,Hkv,S,D); probs (B,H,T,S) F32; all dense.
// Query head h reads KV head h / (H/Hkv). No atomics: every output element has one owner
// thread and a fixed summation order, so results are deterministic.
#include <cmath>

#include "../cuda_common.cuh"
#include "attention_kernels.h"

namespace microllm::ops {
namespace {

using namespace cuda_detail;

constexpr int kThreads = 256;  // per block; a multiple of 32 (block reductions need it)
constexpr int kWarps = kThreads / kWarp;
// The head dim lives in dynamic shared memory (one F32 row); 8192 floats is 32 KiB.
constexpr int64_t kMaxHeadDim = 8192;

// Dimensions the kernels read, as plain integers.
struct Dims {
  int64_t B, H, Hkv, T, S;
  int D;
  bool causal;
  float scale;
};

// Splits a query row index (b, h, t) flattened over (B, H, T) and finds its KV head.
struct QueryRow {
  int64_t b, h, t, kv;  // kv = b·Hkv + h / (H/Hkv), the (b, KV head) pair
  __device__ QueryRow(const Dims& s, int64_t row) {
    t = row % s.T;
    const int64_t bh = row / s.T;  // b·H + h
    h = bh % s.H;
    b = bh / s.H;
    kv = b * s.Hkv + h / (s.H / s.Hkv);
  }
};

// Head-dim groups of a block: with D ≤ kThreads the block splits into kThreads/D groups of D
// threads that each take every groups-th term of a sum, so short head dims (64, 128) keep
// all 256 threads busy instead of D of them.
__device__ __forceinline__ int dim_groups(int D) { return D <= kThreads ? kThreads / D : 1; }

// out[d] = Σ_j w[j]·m[j][d] over j < S for an (S, D) matrix m; called by the whole block
// (it synchronizes). Terms with w[j] = 0 (masked keys) are skipped: besides the saved work,
// masked keys never touch the output even if their rows hold non-finite values. The group
// partials are added in group order, so the sum order is fixed.
// w (S), m (S, D), partial (kThreads) shared, out (D).
template <class T>
__device__ void weighted_row_sum(const float* w, const T* m, int64_t S, int D, float* partial,
                                 T* out) {
  const int groups = dim_groups(D);
  const int tid = threadIdx.x;
  if (groups > 1) {
    if (tid < groups * D) {
      const int g = tid / D, d = tid % D;
      float acc = 0.0f;
      for (int64_t j = g; j < S; j += groups) {
        const float wj = w[j];
        if (wj != 0.0f) acc += wj * to_float(m[j * D + d]);
      }
      partial[tid] = acc;
    }
    __syncthreads();
    for (int d = tid; d < D; d += kThreads) {
      float acc = 0.0f;
      for (int g = 0; g < groups; ++g) acc += partial[g * D + d];
      out[d] = from_float<T>(acc);
    }
  } else {
    for (int d = tid; d < D; d += kThreads) {
      float acc = 0.0f;
      for (int64_t j = 0; j < S; ++j) {
        const float wj = w[j];
        if (wj != 0.0f) acc += wj * to_float(m[j * D + d]);
      }
      out[d] = from_float<T>(acc);
    }
  }
}

// One block per query row (b, h, t): scores of all S keys into the probs row, softmax in
// place, then the output row.
// q, out (B, H, T, D); k, v (B, Hkv, S, D); q_pos (T); k_pos (S); probs (B, H, T, S).
template <class T>
__global__ void attention_forward_kernel(Dims s, const T* q, const T* k, const T* v,
                                         const int64_t* q_pos, const int64_t* k_pos, T* out,
                                         float* probs) {
  extern __shared__ float q_row[];     // (D) the query row in F32
  __shared__ float partial[kThreads];  // head-dim group partials of the output
  __shared__ float scratch[kWarp];     // block reductions
  const int64_t row = blockIdx.x;      // (b, h, t) flattened over (B, H, T)
  const QueryRow r(s, row);
  const T* k_head = k + r.kv * s.S * s.D;  // (S, D)
  const T* v_head = v + r.kv * s.S * s.D;  // (S, D)
  float* p_row = probs + row * s.S;        // (S)
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;

  for (int d = threadIdx.x; d < s.D; d += kThreads) q_row[d] = to_float(q[row * s.D + d]);
  __syncthreads();

  // Scores: a warp per key, lanes over d, so each key row is read with coalesced loads.
  const int64_t query_pos = q_pos[r.t];
  float row_max = -INFINITY;
  for (int64_t j = warp; j < s.S; j += kWarps) {
    float score = -INFINITY;
    if (!s.causal || k_pos[j] <= query_pos) {  // uniform over the warp: warp_sum is safe
      float dot = 0.0f;
      for (int d = lane; d < s.D; d += kWarp) dot += q_row[d] * to_float(k_head[j * s.D + d]);
      score = warp_sum(dot) * s.scale;
      row_max = fmaxf(row_max, score);
    }
    if (lane == 0) p_row[j] = score;
  }
  // The block reduction synchronizes, which also publishes the raw scores to every thread.
  row_max = block_max(row_max, scratch);
  const bool any_visible = row_max != -INFINITY;  // else every probability and output is 0

  // Exponentials in place and their sum.
  float total = 0.0f;
  for (int64_t j = threadIdx.x; j < s.S; j += kThreads) {
    const float e = any_visible ? expf(p_row[j] - row_max) : 0.0f;
    p_row[j] = e;
    total += e;
  }
  total = block_sum(total, scratch);
  // Normalize: each thread rescales the entries it wrote itself.
  for (int64_t j = threadIdx.x; j < s.S; j += kThreads)
    p_row[j] = any_visible ? p_row[j] / total : 0.0f;
  __syncthreads();  // the whole probs row is read below

  weighted_row_sum(p_row, v_head, s.S, s.D, partial, out + row * s.D);
}

// Backward, one block per query row (b, h, t): dS row into the scratch, then the dQ row.
// k, v (B, Hkv, S, D); probs, dscores (B, H, T, S); dout, dq (B, H, T, D).
template <class T>
__global__ void attention_backward_query_kernel(Dims s, const T* k, const T* v, const float* probs,
                                                const T* dout, float* dscores, T* dq) {
  extern __shared__ float dout_row[];  // (D) the output gradient row in F32
  __shared__ float partial[kThreads];  // head-dim group partials of dQ
  __shared__ float scratch[kWarp];     // block reductions
  const int64_t row = blockIdx.x;      // (b, h, t) flattened over (B, H, T)
  const QueryRow r(s, row);
  const T* k_head = k + r.kv * s.S * s.D;  // (S, D)
  const T* v_head = v + r.kv * s.S * s.D;  // (S, D)
  const float* p_row = probs + row * s.S;  // (S)
  float* ds_row = dscores + row * s.S;     // (S)
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;

  for (int d = threadIdx.x; d < s.D; d += kThreads) dout_row[d] = to_float(dout[row * s.D + d]);
  __syncthreads();

  // dP_j = dO·V_j: a warp per key as in the forward; keys with P_j = 0 (masked) get dS_j = 0
  // anyway, so their dot product is skipped. Lane 0 keeps this warp's part of Σ_j P_j·dP_j.
  float p_dot_dp = 0.0f;
  for (int64_t j = warp; j < s.S; j += kWarps) {
    const float p = p_row[j];
    float dp = 0.0f;
    if (p != 0.0f) {  // uniform over the warp: warp_sum is safe
      for (int d = lane; d < s.D; d += kWarp) dp += dout_row[d] * to_float(v_head[j * s.D + d]);
      dp = warp_sum(dp);
    }
    if (lane == 0) {
      ds_row[j] = dp;
      p_dot_dp += p * dp;
    }
  }
  // Synchronizes too, publishing the dP row to every thread.
  p_dot_dp = block_sum(p_dot_dp, scratch);

  // dS_j = P_j·(dP_j − Σ P·dP)·scale, in place.
  for (int64_t j = threadIdx.x; j < s.S; j += kThreads) {
    const float p = p_row[j];
    ds_row[j] = p != 0.0f ? p * (ds_row[j] - p_dot_dp) * s.scale : 0.0f;
  }
  __syncthreads();  // the whole dS row is read below

  weighted_row_sum(ds_row, k_head, s.S, s.D, partial, dq + row * s.D);
}

// Backward, one block per key row (b, kv head, j): dK_j = Σ dS[·, j]·Q and dV_j = Σ P[·, j]·dO
// over the group's query heads and queries, in (h, t) order within each head-dim group.
// Owning whole key rows is what makes the GQA sum deterministic without atomics.
// q, dout (B, H, T, D); probs, dscores (B, H, T, S); dk, dv (B, Hkv, S, D).
template <class T>
__global__ void attention_backward_key_kernel(Dims s, const T* q, const float* probs, const T* dout,
                                              const float* dscores, T* dk, T* dv) {
  __shared__ float partial_dk[kThreads];  // head-dim group partials
  __shared__ float partial_dv[kThreads];
  const int64_t key_row = blockIdx.x;  // (b, kv head, j) flattened over (B, Hkv, S)
  const int64_t j = key_row % s.S;
  const int64_t kv = key_row / s.S;  // b·Hkv + kv head
  const int64_t b = kv / s.Hkv, kv_head = kv % s.Hkv;
  const int64_t group = s.H / s.Hkv;
  // The group's query rows (h, t) are consecutive in (B, H, T): rows first_row + i for
  // i < group·T, in the same h-major order as the CPU reference.
  const int64_t first_row = (b * s.H + kv_head * group) * s.T;
  const int64_t items = group * s.T;
  const int D = s.D;
  T* dk_row = dk + key_row * D;  // (D)
  T* dv_row = dv + key_row * D;  // (D)

  const int groups = dim_groups(D);
  const int tid = threadIdx.x;
  if (groups > 1) {
    if (tid < groups * D) {
      const int g = tid / D, d = tid % D;
      float acc_dk = 0.0f, acc_dv = 0.0f;
      for (int64_t i = g; i < items; i += groups) {
        const int64_t row = first_row + i;
        const float p = probs[row * s.S + j];
        if (p == 0.0f) continue;  // masked: dS is 0 too
        acc_dk += dscores[row * s.S + j] * to_float(q[row * D + d]);
        acc_dv += p * to_float(dout[row * D + d]);
      }
      partial_dk[tid] = acc_dk;
      partial_dv[tid] = acc_dv;
    }
    __syncthreads();
    for (int d = tid; d < D; d += kThreads) {
      float acc_dk = 0.0f, acc_dv = 0.0f;
      for (int g = 0; g < groups; ++g) {
        acc_dk += partial_dk[g * D + d];
        acc_dv += partial_dv[g * D + d];
      }
      dk_row[d] = from_float<T>(acc_dk);
      dv_row[d] = from_float<T>(acc_dv);
    }
  } else {
    for (int d = tid; d < D; d += kThreads) {
      float acc_dk = 0.0f, acc_dv = 0.0f;
      for (int64_t i = 0; i < items; ++i) {
        const int64_t row = first_row + i;
        const float p = probs[row * s.S + j];
        if (p == 0.0f) continue;
        acc_dk += dscores[row * s.S + j] * to_float(q[row * D + d]);
        acc_dv += p * to_float(dout[row * D + d]);
      }
      dk_row[d] = from_float<T>(acc_dk);
      dv_row[d] = from_float<T>(acc_dv);
    }
  }
}

Dims dims_of(const AttentionShape& s) {
  MICROLLM_CHECK(s.D > 0 && s.D <= kMaxHeadDim, "attention",
                 "CUDA attention takes head dims up to ", kMaxHeadDim, ", found D = ", s.D);
  MICROLLM_CHECK(s.Hkv > 0 && s.H % s.Hkv == 0, "attention", "query heads ", s.H,
                 " are not a multiple of KV heads ", s.Hkv);
  // Grids are 1-D with one block per query row or key row.
  MICROLLM_CHECK(s.B * s.H * s.T <= INT32_MAX && s.B * s.Hkv * s.S <= INT32_MAX, "attention",
                 "too many rows for the CUDA grid: B ", s.B, " H ", s.H, " T ", s.T, " Hkv ", s.Hkv,
                 " S ", s.S);
  return Dims{
      s.B, s.H, s.Hkv, s.T, s.S, static_cast<int>(s.D), s.causal, static_cast<float>(s.scale)};
}

}  // namespace

void attention_forward_cuda(const AttentionShape& shape, const Tensor& q, const Tensor& k,
                            const Tensor& v, const Tensor& q_pos, const Tensor& k_pos,
                            const Tensor& out, const Tensor& probs) {
  const Dims s = dims_of(shape);
  MICROLLM_CHECK(probs.dtype() == DType::F32, "attention", "CUDA probabilities are f32, found ",
                 probs.describe());
  MICROLLM_CHECK(q_pos.dtype() == DType::I64 && k_pos.dtype() == DType::I64, "attention",
                 "positions must be i64, found ", q_pos.describe(), " and ", k_pos.describe());
  const int64_t rows = s.B * s.H * s.T;
  if (rows == 0) return;
  const size_t smem = static_cast<size_t>(s.D) * sizeof(float);
  dispatch_cuda_float(q.dtype(), "attention", [&](auto tag) {
    using T = decltype(tag);
    attention_forward_kernel<T><<<static_cast<unsigned>(rows), kThreads, smem, stream_of(out)>>>(
        s, ptr<const T>(q), ptr<const T>(k), ptr<const T>(v), ptr<const int64_t>(q_pos),
        ptr<const int64_t>(k_pos), ptr<T>(out), ptr<float>(probs));
    CUDA_CHECK_LAUNCH("attention_forward_kernel");
  });
}

void attention_backward_cuda(const AttentionShape& shape, const Tensor& q, const Tensor& k,
                             const Tensor& v, const Tensor& probs, const Tensor& dout,
                             const Tensor& dq, const Tensor& dk, const Tensor& dv) {
  const Dims s = dims_of(shape);
  MICROLLM_CHECK(probs.dtype() == DType::F32, "attention", "CUDA probabilities are f32, found ",
                 probs.describe());
  const int64_t query_rows = s.B * s.H * s.T, key_rows = s.B * s.Hkv * s.S;
  const size_t smem = static_cast<size_t>(s.D) * sizeof(float);
  dispatch_cuda_float(q.dtype(), "attention", [&](auto tag) {
    using T = decltype(tag);
    // dS (B,H,T,S) in F32, from the stream-ordered allocator: freed on return, reused only
    // by later work on the same stream.
    const Tensor dscores = Tensor::empty({s.B, s.H, s.T, s.S}, DType::F32, probs.device());
    if (query_rows > 0) {
      attention_backward_query_kernel<T>
          <<<static_cast<unsigned>(query_rows), kThreads, smem, stream_of(dq)>>>(
              s, ptr<const T>(k), ptr<const T>(v), ptr<const float>(probs), ptr<const T>(dout),
              ptr<float>(dscores), ptr<T>(dq));
      CUDA_CHECK_LAUNCH("attention_backward_query_kernel");
    }
    // With T = 0 the key kernel still runs and writes zeros to dK and dV.
    if (key_rows > 0) {
      attention_backward_key_kernel<T>
          <<<static_cast<unsigned>(key_rows), kThreads, 0, stream_of(dk)>>>(
              s, ptr<const T>(q), ptr<const float>(probs), ptr<const T>(dout),
              ptr<const float>(dscores), ptr<T>(dk), ptr<T>(dv));
      CUDA_CHECK_LAUNCH("attention_backward_key_kernel");
    }
  });
}

}  // namespace microllm::ops
