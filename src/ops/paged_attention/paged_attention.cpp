// paged_attention: validation (shapes, dtypes, devices, row layout, workspace size), the host
// plan (split mode or single pass) and dispatch. Inference only: nothing is recorded for
// autograd, nothing is allocated, no device value is read.
#include "microllm/ops/paged_attention.h"

#include <algorithm>
#include <cmath>

#include "../common.h"
#include "../kv_write/kv_cache_checks.h"
#include "paged_attention_kernels.h"

namespace microllm::ops {
namespace {

constexpr const char* kOp = "paged_attention";

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

void check_sizes(int64_t H, int64_t Hkv, int64_t D, int64_t max_seq_len) {
  MICROLLM_CHECK(Hkv > 0 && H % Hkv == 0, kOp, "query heads ", H,
                 " are not a multiple of KV heads ", Hkv);
  MICROLLM_CHECK(D > 0, kOp, "head dimension must be > 0, found D = ", D);
  // The split grid has one z-block per chunk (a CUDA grid dimension holds 65535).
  MICROLLM_CHECK(max_seq_len >= 0 && max_seq_len <= 65535 * kPagedChunkKeys, kOp,
                 "max_seq_len must lie in [0, ", 65535 * kPagedChunkKeys, "], found ", max_seq_len);
}

}  // namespace

PagedAttentionPlan plan_paged_attention(int64_t N, int64_t H, int64_t Hkv, int64_t D,
                                        int64_t max_seq_len) {
  PagedAttentionPlan p{};
  p.N = N;
  p.H = H;
  p.Hkv = Hkv;
  p.D = D;
  p.max_seq_len = max_seq_len;
  p.head_blocks = ceil_div(H / Hkv, kPagedHeadsPerBlock);
  p.num_chunks = ceil_div(max_seq_len, kPagedChunkKeys);
  // Split only when the single-pass grid would leave the GPU idle and there is more than
  // one chunk to spread; the result is the same bits either way.
  p.split = p.num_chunks > 1 && N * Hkv * p.head_blocks < kPagedSplitBelowBlocks;
  const int64_t row_blocks = N * Hkv * p.head_blocks;
  p.num_splits = p.split
                     ? std::clamp<int64_t>(kPagedSplitMaxBlocks / std::max<int64_t>(row_blocks, 1),
                                           1, p.num_chunks)
                     : 1;
  // The counters (one u32 per (row, head block) of any split grid: fewer than
  // kPagedSplitBelowBlocks, at a place no plan moves), then the partials (D + 2 floats per
  // chunk of each query row).
  p.workspace_floats = p.split ? kPagedSplitBelowBlocks + N * H * p.num_chunks * (D + 2) : 0;
  return p;
}

int64_t paged_attention_workspace_bytes(int64_t max_tokens, int64_t H, int64_t Hkv, int64_t D,
                                        int64_t max_seq_len) {
  check_sizes(H, Hkv, D, max_seq_len);
  MICROLLM_CHECK(max_tokens >= 0, kOp, "max_tokens must be >= 0, found ", max_tokens);
  // The workspace grows with N while the step splits; the largest splitting N decides it.
  const int64_t head_blocks = ceil_div(H / Hkv, kPagedHeadsPerBlock);
  const int64_t largest_split_rows =
      std::min(max_tokens, (kPagedSplitBelowBlocks - 1) / (Hkv * head_blocks));
  if (largest_split_rows <= 0) return 0;
  const PagedAttentionPlan p = plan_paged_attention(largest_split_rows, H, Hkv, D, max_seq_len);
  return p.workspace_floats * static_cast<int64_t>(sizeof(float));
}

void paged_attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                     const Tensor& query_starts, const Tensor& seq_lens, const Tensor& block_tables,
                     double scale, int64_t max_seq_len, const Tensor& out, const Tensor& workspace,
                     PagedHistory history) {
  detail::check_kv_cache(kOp, k_cache, v_cache);
  const Device device = k_cache.device();
  const int64_t NB = k_cache.size(0), BS = k_cache.size(1), Hkv = k_cache.size(2),
                D = k_cache.size(3);
  detail::check_floating(kOp, q, "q");
  detail::check_defined(kOp, out, "out");
  detail::check_same_device(kOp, q, "q", k_cache, "k_cache");
  detail::check_same_device(kOp, out, "out", k_cache, "k_cache");
  detail::check_rank(kOp, q, "q", 3);
  const int64_t N = q.size(0), H = q.size(1);
  MICROLLM_CHECK(q.size(2) == D, kOp, "expected q (N, H, D) with the cache's D = ", D, ", found q ",
                 q.describe(), " and k_cache ", k_cache.describe());
  MICROLLM_CHECK(out.shape() == q.shape() && out.dtype() == q.dtype(), kOp,
                 "out must be (N, H, D) of q's dtype, like q ", q.describe(), ", found out ",
                 out.describe());
  MICROLLM_CHECK(!(device.is_cuda() && q.dtype() == DType::F64), kOp,
                 "CUDA kernels take f32, bf16 or f16, found q ", q.describe());

  detail::check_step_ids(kOp, query_starts, "query_starts", 1, device);
  detail::check_step_ids(kOp, seq_lens, "seq_lens", 1, device);
  detail::check_step_ids(kOp, block_tables, "block_tables", 2, device);
  const int64_t B = seq_lens.size(0), M = block_tables.size(1);
  MICROLLM_CHECK(query_starts.size(0) == B + 1 && block_tables.size(0) == B, kOp,
                 "expected query_starts (B+1), seq_lens (B) and block_tables (B, M) with B = ", B,
                 ", found query_starts ", query_starts.describe(), ", seq_lens ",
                 seq_lens.describe(), " and block_tables ", block_tables.describe());
  check_sizes(H, Hkv, D, max_seq_len);
  MICROLLM_CHECK(max_seq_len <= M * BS, kOp, "block_tables ", block_tables.describe(),
                 " is too narrow: M = ", M, " blocks of BS = ", BS, " hold ", M * BS,
                 " keys, fewer than max_seq_len = ", max_seq_len);

  PagedAttentionPlan p = plan_paged_attention(N, H, Hkv, D, max_seq_len);
  p.B = B;
  p.NB = NB;
  p.BS = BS;
  p.M = M;
  p.scale = std::isnan(scale) ? 1.0 / std::sqrt(static_cast<double>(D)) : scale;
  p.q_row_stride = detail::dense_row_stride(kOp, q, "q");
  p.out_row_stride = detail::dense_row_stride(kOp, out, "out");
  p.early_history = history == PagedHistory::earlier_steps;
  if (p.workspace_floats > 0) {
    const int64_t need = p.workspace_floats * static_cast<int64_t>(sizeof(float));
    MICROLLM_CHECK(workspace.defined(), kOp, "this step needs a workspace of ", need,
                   " bytes (paged_attention_workspace_bytes), found none");
    MICROLLM_CHECK(workspace.dtype() == DType::F32 && workspace.is_contiguous(), kOp,
                   "workspace must be dense f32, found ", workspace.describe());
    detail::check_same_device(kOp, workspace, "workspace", k_cache, "k_cache");
    MICROLLM_CHECK(
        static_cast<int64_t>(workspace.nbytes()) >= need, kOp, "workspace ", workspace.describe(),
        " holds ", workspace.nbytes(), " bytes, this step (N = ", N, ", H = ", H, ", D = ", D,
        ", max_seq_len = ", max_seq_len, ") needs ", need, " (paged_attention_workspace_bytes)");
  }
  if (N == 0) return;
  MICROLLM_KERNEL(device, paged_attention, p, q, k_cache, v_cache, query_starts, seq_lens,
                  block_tables, out, workspace);
}

}  // namespace microllm::ops
