// Matrix products: matmul / batched matmul with optional transposes, and linear layers.
//
// matmul(a, b): a (M, K) or (B, M, K); b (K, N) or (B, K, N); out (M, N) or (B, M, N).
// With trans_a the last two dimensions of a are read as (K, M); with trans_b, b as (N, K).
// A 2-D operand is shared across the batch of the other. CPU GEMM runs through OpenBLAS.
#pragma once

#include "microllm/core/tensor.h"

namespace microllm::ops {

Tensor matmul(const Tensor& a, const Tensor& b, bool trans_a = false, bool trans_b = false);
// matmul's product, with its values, written into `out`: dense, of matmul's output shape and
// a's dtype and device, separate from a and b; no autograd. On CUDA the GEMM writes out
// directly; on the CPU so do F32/F64, while BF16/F16 are widened as in matmul and the
// product rounded into out.
void matmul_out(const Tensor& a, const Tensor& b, bool trans_a, bool trans_b, const Tensor& out);

// y = x · weightᵀ + bias. x (..., in), weight (out, in) (Hugging Face orientation),
// bias (out) or undefined; y (..., out).
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());
// The allocation-free form: linear's GEMM (OpenBLAS / cuBLASLt) and bias, with the same
// values, into a preallocated dense out (..., out) of x's dtype and device; no autograd.
// x, weight and bias dense; f32 or f64 on the CPU (no bf16/f16 widening), f32, bf16 or f16
// on CUDA. out must be separate from the inputs. On CUDA it makes three small host-side
// (1, rows, cols) view handles for cuBLASLt, no device memory; on the CPU nothing at all.
void linear_out(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& out);

// The decode projection: y = x · weightᵀ (+ bias) for a few rows (M ≤ kGemvMaxRows), x (M, in)
// and y dense. Every output element is one F32 accumulation in an order fixed by the matrix
// shape, so a row gives the same bits whichever rows share the call (batch invariant without
// a plan), and the weight is streamed once for all M rows (decode is bandwidth bound). On
// CUDA the kernel, and with it the order, depends on the range of M: 1–4 rows (and F32
// always) on the CUDA cores, 5–8 rows of BF16/F16 on tensor cores (GemvFusion::kernel_rows
// picks by another count); within a range the bits do not depend on M. With
// GemvEpilogue::swiglu, weight is the fused gate/up matrix (2F, in), rows [0, F) gate and
// [F, 2F) up, bias undefined, and y (M, F) = swiglu(gate, up) rounded as
// swiglu_out(linear(x, gate), linear(x, up)) rounds: g and u to x's dtype, then silu(g)·u.
// CPU: f32/f64 (a plain loop, the reference); CUDA: f32, bf16, f16 with in a multiple of
// 16 bytes of elements and 16-byte aligned x, weight, y. No autograd, no allocation.
inline constexpr int64_t kGemvMaxRows = 8;
enum class GemvEpilogue { none, swiglu, rope_kv_write };
void gemv_out(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& out,
              GemvEpilogue epilogue = GemvEpilogue::none);
// True when gemv_out takes x (rows, in) of `dtype` on `device` against a weight of width in.
bool gemv_supported(Device device, DType dtype, int64_t rows, int64_t in);

// What the decode GEMV does around the product, so a transformer layer's decode rows need
// no separate norm or residual kernels. Each part gives the bits of the unfused operators:
//   norm_weight (in) defined: x is first replaced by rms_norm(x, norm_weight, norm_eps)
//     rounded as rms_norm_out rounds (the same F32 sum of squares, in the same order), in
//     the kernel: the normalized rows are never stored;
//   residual (M, out) defined: out = residual + (x·Wᵀ + bias), rounded as
//     add_out(residual, linear_out(...)) rounds: the product to x's dtype, then the sum;
//     residual may be out itself (in place) but not x; only with GemvEpilogue::none;
//   GemvEpilogue::rope_kv_write: weight is the fused QKV matrix (H·D + 2·Hkv·D, in) and
//     out undefined; the product's q, k and v parts (rounded to x's dtype, + bias) go where
//     ops::rope_kv_write puts them (kv_write.h: q and k rotated at their row's position
//     into q_out and k_out, k and v into the cache slots), with its bits; the product
//     itself is not stored. H, Hkv and D come from q_out and the caches.
struct GemvRopeKvWrite {
  Tensor positions;         // (M) i32
  Tensor inv_freq;          // (D/2) f32
  Tensor slot_mapping;      // (M) i32, −1: not written to the cache
  Tensor q_out;             // (M, H, D) dense, x's dtype
  Tensor k_out;             // (M, Hkv, D) dense, x's dtype
  Tensor k_cache, v_cache;  // (NB, BS, Hkv, D) f32 or bf16
};
// kernel_rows (0, or M…kGemvMaxRows): the kernel is chosen as for a call of that many rows,
// so a caller whose calls have varying row counts (DecoderStep: the decode rows of a step
// that also holds prefill rows) can keep one kernel, and so one order of sums, per step size.
// early_inputs: the caller's promise that the residual and rope's positions and slot_mapping
// were written before the kernel that precedes this call on the stream started (in a decode
// step: by the host's upload or two or more kernels back), so that on CUDA the kernel may read
// them, with the bias (and at one row the norm weight), before it waits for that kernel
// (src/cuda/dependent_launch.cuh); the bits are the same either way. Taken by the CUDA-core
// kernel (1–4 rows) unless MICROLLM_GEMV_EARLY_INPUTS=0.
struct GemvFusion {
  GemvEpilogue epilogue = GemvEpilogue::none;
  Tensor norm_weight;
  double norm_eps = 0.0;
  Tensor residual;
  GemvRopeKvWrite rope;  // GemvEpilogue::rope_kv_write only
  int64_t kernel_rows = 0;
  bool early_inputs = false;
};
void gemv_out(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& out,
              const GemvFusion& fusion);
// True when gemv_out takes x (rows, in) with a norm prologue (on CUDA the normalized rows
// live in shared memory: at most 40 KB of them, and at most 1,024 16-byte groups per row).
bool gemv_norm_supported(Device device, DType dtype, int64_t rows, int64_t in);

// The reference: three plain loops in F64, no BLAS, no autograd. Same shape rules.
Tensor matmul_naive(const Tensor& a, const Tensor& b, bool trans_a = false, bool trans_b = false);

}  // namespace microllm::ops
