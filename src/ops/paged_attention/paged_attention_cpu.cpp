// CPU reference of paged attention: for each new token row and query head, the plain softmax
// over the row's visible keys, read through the block table. Arithmetic as the reference
// attention's CPU kernel (src/ops/attention/attention_cpu.cpp): F64 dot products, scores and
// probabilities rounded to the compute dtype (F32, or F64 for F64 inputs), F64 sums.
// Layout: q, out (N, H, D) rows at q_row_stride / out_row_stride; key j of sequence b in slot
// block_tables[b][j / BS]·BS + j % BS of the caches (NB, BS, Hkv, D).
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "../common.h"
#include "microllm/core/element.h"
#include "paged_attention_kernels.h"

namespace microllm::ops {
namespace {

// The sequence of row n and the number of keys it sees; visible 0 for rows outside every
// sequence (padding), which get zeros.
struct RowPlace {
  int64_t b = -1, visible = 0;
};

RowPlace place_row(const PagedAttentionPlan& p, const int32_t* query_starts,
                   const int32_t* seq_lens, int64_t n) {
  // The last b with query_starts[b] <= n; row n is in b when it is also below query_starts[b+1].
  const int64_t b = std::upper_bound(query_starts, query_starts + p.B + 1, n) - query_starts - 1;
  if (b < 0 || b >= p.B) return {};
  const int64_t new_tokens = query_starts[b + 1] - query_starts[b];
  const int64_t position = seq_lens[b] - new_tokens + (n - query_starts[b]);
  return {b, std::clamp<int64_t>(position + 1, 0, p.max_seq_len)};
}

}  // namespace

void paged_attention_cpu(const PagedAttentionPlan& p, const Tensor& q, const Tensor& k_cache,
                         const Tensor& v_cache, const Tensor& query_starts, const Tensor& seq_lens,
                         const Tensor& block_tables, const Tensor& out,
                         const Tensor& /*workspace*/) {
  const int32_t* starts = query_starts.data<int32_t>();
  const int32_t* lens = seq_lens.data<int32_t>();
  const int32_t* tables = block_tables.data<int32_t>();  // (B, M)
  const int64_t group = p.H / p.Hkv;
  detail::dispatch_float(q.dtype(), [&](auto tag) {
    using T = decltype(tag);  // compute dtype: double for F64, float otherwise
#pragma omp parallel for collapse(2) schedule(static)
    for (int64_t n = 0; n < p.N; ++n)
      for (int64_t h = 0; h < p.H; ++h) {
        const RowPlace place = place_row(p, starts, lens, n);
        const int64_t kv = h / group;
        const int64_t out_row = n * p.out_row_stride + h * p.D;
        // First element of each visible key's (D) row for this KV head, in either cache.
        std::vector<int64_t> key_rows(static_cast<size_t>(place.visible));
        for (int64_t j = 0; j < place.visible; ++j) {
          const int64_t slot = tables[place.b * p.M + j / p.BS] * p.BS + j % p.BS;
          key_rows[j] = (slot * p.Hkv + kv) * p.D;
        }
        std::vector<double> q_row(static_cast<size_t>(p.D));
        for (int64_t d = 0; d < p.D; ++d)
          q_row[d] = load_element(q.raw_data(), n * p.q_row_stride + h * p.D + d, q.dtype());
        std::vector<double> probs(static_cast<size_t>(place.visible));
        double row_max = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j < place.visible; ++j) {
          double dot = 0.0;
          for (int64_t d = 0; d < p.D; ++d)
            dot += q_row[d] * load_element(k_cache.raw_data(), key_rows[j] + d, k_cache.dtype());
          probs[j] = static_cast<T>(dot * p.scale);  // rounded as a materialized score is
          row_max = std::max(row_max, probs[j]);
        }
        double total = 0.0;
        for (int64_t j = 0; j < place.visible; ++j) total += std::exp(probs[j] - row_max);
        for (int64_t j = 0; j < place.visible; ++j)
          probs[j] = static_cast<T>(std::exp(probs[j] - row_max) / total);
        for (int64_t d = 0; d < p.D; ++d) {
          double acc = 0.0;  // no visible key: zeros
          for (int64_t j = 0; j < place.visible; ++j)
            acc += probs[j] * load_element(v_cache.raw_data(), key_rows[j] + d, v_cache.dtype());
          store_element(out.raw_data(), out_row + d, out.dtype(), static_cast<T>(acc));
        }
      }
  });
}

}  // namespace microllm::ops
