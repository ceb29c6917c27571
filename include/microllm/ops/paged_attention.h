// Paged attention: causal GQA attention of a step's new tokens over the keys and values their
// sequences hold in the paged KV cache (DESIGN §7, docs/inference.md).
//
// A step is a flattened variable-length batch of N new tokens from B sequences. Sequence b
// owns rows [query_starts[b], query_starts[b+1]) and, after this step, seq_lens[b] keys; its
// n_b new tokens are its last n_b positions, so its new token i sits at position
// p = seq_lens[b] − n_b + i and attends to keys 0..p. Key j of sequence b lives in slot
// block_tables[b][j / BS]·BS + j % BS of k_cache, v_cache (NB, BS, Hkv, D). Query head h reads
// KV head h / (H / Hkv). The step's own keys must already be in the cache (ops::kv_write runs
// first), so one call serves whole prefill, chunked prefill (later chunks read the earlier
// ones from the cache) and decode (one row per sequence). Rows outside
// [query_starts[0], query_starts[B]) (graph padding) get zeros.
//
// Scores, softmax and the weighted sum are F32 (F64 for F64 inputs on the CPU); the output
// has q's dtype. Inference only: not recorded by autograd, allocates nothing, reads no device
// value on the host (only shapes, dtypes and devices are checked; the engine checks ids where
// they enter). Two runs give the same bits, and on CUDA a row's result depends only on its
// query, its sequence's keys and the cache (not on the other rows of the step, N, B or
// max_seq_len): the split-K mode and the single-pass mode add the same terms in the same order.
#pragma once

#include <cmath>
#include <cstdint>

#include "microllm/core/tensor.h"

namespace microllm::ops {

// Where the keys before each sequence's new tokens come from: what the CUDA kernel may load
// before it waits for the kernel just before it in the stream (programmatic dependent launch,
// src/cuda/dependent_launch.cuh). Either way the result has the same bits.
enum class PagedHistory {
  // Any kernel may have written them, the one just before this call included: every cache
  // load waits for that kernel.
  unknown,
  // Earlier steps wrote them, before the kernel just before this call, which writes at most
  // the new tokens' keys (DecoderStep: the QKV projection's rope_kv_write): the kernel loads
  // its first tile of them, and the step's metadata, while that kernel finishes.
  earlier_steps,
};

// q (N, H, D) floating (CPU: f32, f64, bf16, f16; CUDA: f32, bf16, f16; CUDA D ∈ {64, 128});
// k_cache, v_cache (NB, BS, Hkv, D) dense f32 or bf16, one dtype, H % Hkv == 0;
// query_starts (B+1), seq_lens (B), block_tables (B, M): dense i32;
// scale multiplies q·k (NaN: 1/sqrt(D));
// max_seq_len: a host bound on every seq_lens[b] (the scheduler's longest sequence, or the
//   context limit), at most M·BS; keys past it are never read. It sizes the split-K grid, so
//   the tighter it is, the less idle work a decode step launches;
// out (N, H, D) q's dtype, overwritten; q and out may have strided rows ((H, D) rows dense);
// workspace: dense f32 of at least paged_attention_workspace_bytes(N, H, Hkv, D, max_seq_len)
//   bytes (undefined when that is 0), preallocated once by the caller and zero-filled before
//   its first use (its tail holds the split blocks' counters; every call leaves them zero).
//   All on one device.
// history: see PagedHistory (only `unknown` is safe when one kernel wrote the whole cache).
void paged_attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                     const Tensor& query_starts, const Tensor& seq_lens, const Tensor& block_tables,
                     double scale, int64_t max_seq_len, const Tensor& out, const Tensor& workspace,
                     PagedHistory history = PagedHistory::unknown);

// Bytes of F32 workspace that every paged_attention call with at most max_tokens rows and a
// max_seq_len of at most `max_seq_len` needs (the same on every device): the split-K partial
// maxima, sums and outputs of the steps with few rows and their counters. 0 when no such
// call splits.
int64_t paged_attention_workspace_bytes(int64_t max_tokens, int64_t H, int64_t Hkv, int64_t D,
                                        int64_t max_seq_len);

}  // namespace microllm::ops
