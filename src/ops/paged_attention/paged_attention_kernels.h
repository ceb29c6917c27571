// Kernel entry points of paged attention (contract of paged_attention_cpu.cpp and
// paged_attention_cuda.cu) and the host plan both devices share.
//
// The keys of a query row are cut into chunks of kPagedChunkKeys at fixed positions
// (0, 64, 128, ...). A chunk's partial softmax state (max m, sum l, unnormalized output o)
// is computed over its keys; the chunks are then folded left to right. The CUDA kernels
// either spread the chunks over `num_splits` blocks per row (block z takes chunks z,
// z + num_splits, ...), write each chunk's partial and let the row's last block to finish
// fold them (split mode: a step with few rows, e.g. decode at batch 1, still fills the GPU;
// the blocks count on a u32 counter per (row, head block) at the start of the workspace,
// which must be zero before the first call and which every call leaves zero), or fold the
// chunks inside one block (single-pass mode); both perform the same F32 operations in the
// same order, so the mode and the split count change the speed and never the bits.
#pragma once

#include <cstdint>

#include "microllm/core/tensor.h"

namespace microllm::ops {

// Keys per chunk: the unit of split-K work and of the fold.
constexpr int64_t kPagedChunkKeys = 64;
// Query heads one CUDA block serves (one warp each); a KV group of more heads takes
// ceil(group / kPagedHeadsPerBlock) blocks.
constexpr int64_t kPagedHeadsPerBlock = 4;
// A step whose single-pass grid (N · Hkv · head blocks) has fewer blocks than this runs in
// split mode: 2 blocks per SM of a 132-SM H100/H200. A constant, so plans (and the workspace
// size) never depend on the GPU a program runs on.
constexpr int64_t kPagedSplitBelowBlocks = 264;
// Split mode launches at most this many partial blocks (about four per SM) however long
// max_seq_len is: a captured decode step plans for the whole context, and the blocks past a
// row's keys return at once, so their number must stay small.
constexpr int64_t kPagedSplitMaxBlocks = 528;

// Everything a kernel needs, decided on the host from shapes and host values only.
struct PagedAttentionPlan {
  int64_t N, B, H, Hkv, D;               // rows, sequences, query heads, KV heads, head dim
  int64_t NB, BS, M;                     // cache blocks, block size, block-table width
  int64_t max_seq_len;                   // keys past it are never read
  double scale;                          // multiplies q·k
  int64_t q_row_stride, out_row_stride;  // elements between rows n and n+1
  int64_t head_blocks;       // CUDA blocks per KV head: ceil((H / Hkv) / kPagedHeadsPerBlock)
  int64_t num_chunks;        // chunk slots of a row: ceil(max_seq_len / kPagedChunkKeys)
  bool split;                // split mode (CUDA): chunks spread over blocks, the last folds
  int64_t num_splits;        // split mode: partial blocks per (row, head block), ≤ num_chunks
  int64_t workspace_floats;  // F32 workspace this call needs (0 unless split), counters included
  bool early_history;        // PagedHistory::earlier_steps: old keys load before the wait (CUDA)
};

// The plan of a call with these sizes (shared by paged_attention and
// paged_attention_workspace_bytes). Strides and scale are left for the caller to fill.
PagedAttentionPlan plan_paged_attention(int64_t N, int64_t H, int64_t Hkv, int64_t D,
                                        int64_t max_seq_len);

// q (N, H, D) and out (N, H, D) with dense (H, D) rows (CPU: f32/f64/bf16/f16, F64 computes in
// F64; CUDA: f32/bf16/f16, D 64 or 128); k_cache, v_cache (NB, BS, Hkv, D) dense f32/bf16;
// query_starts (B+1), seq_lens (B), block_tables (B, M) dense i32; workspace dense f32 of at
// least plan.workspace_floats elements (the CPU does not use it). Kernels trust the ids.
void paged_attention_cpu(const PagedAttentionPlan& p, const Tensor& q, const Tensor& k_cache,
                         const Tensor& v_cache, const Tensor& query_starts, const Tensor& seq_lens,
                         const Tensor& block_tables, const Tensor& out, const Tensor& workspace);

#if MICROLLM_WITH_CUDA
void paged_attention_cuda(const PagedAttentionPlan& p, const Tensor& q, const Tensor& k_cache,
                          const Tensor& v_cache, const Tensor& query_starts, const Tensor& seq_lens,
                          const Tensor& block_tables, const Tensor& out, const Tensor& workspace);
#endif

}  // namespace microllm::ops
