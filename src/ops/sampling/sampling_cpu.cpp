// CPU reference of sample / sampling_distribution: per row, the transformers steps written
// out with a sort (the CUDA kernel finds the same thresholds by radix select). Reference:
// transformers' TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper and
// MinPLogitsWarper; exact semantics and tie rules in docs/sampling.md.
//
// Workspace per row (V entries each): x F32 (logit / temperature), order I32 (ids sorted by
// x descending, lower id first on ties), mass U64 (⌊exp(x − max)·2⁴³⌋). Rows run in parallel.
// Each floating-point step must round once, as the device's _rn intrinsics do
// (sampling_math.h): no contraction into fused multiply-adds where the target has them
// (aarch64, -march=native).
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include <algorithm>
#include <cstdint>
#include <numeric>

#include "microllm/core/counter_rng.h"
#include "microllm/core/float_convert.h"
#include "sampling_kernels.h"
#include "sampling_math.h"

namespace microllm::ops {
namespace {

using namespace sampling_math;

// One row of logits read as F32 from F32 or BF16 storage.
struct RowLogits {
  const float* f32 = nullptr;
  const uint16_t* bf16 = nullptr;
  float operator[](int64_t i) const { return f32 ? f32[i] : bf16_bits_to_f32(bf16[i]); }
};

struct RowParams {
  float temperature, top_p, min_p;
  int64_t top_k;
  uint64_t seed, position;
};

// The row's outputs; pointers are null for outputs not asked for.
struct RowOut {
  int32_t* id;
  float* scores;  // (V)
  float* probs;   // (V)
};

// First id of the largest value (NaN never wins; an all-NaN row gives 0).
template <class Value>
int32_t argmax(Value value, int64_t vocab) {
  float best = -INFINITY;
  int32_t best_id = kNoId;
  for (int64_t i = 0; i < vocab; ++i)
    if (ranks_above(value(i), static_cast<int32_t>(i), best, best_id)) {
      best = value(i);
      best_id = static_cast<int32_t>(i);
    }
  return best_id == kNoId ? 0 : best_id;
}

void write_one_hot(const RowOut& out, int32_t id, float score, int64_t vocab) {
  if (out.id) *out.id = id;
  if (!out.scores) return;
  for (int64_t i = 0; i < vocab; ++i) {
    out.scores[i] = i == id ? score : -INFINITY;
    out.probs[i] = i == id ? 1.0f : 0.0f;
  }
}

void sample_row(const RowLogits& logits, int64_t vocab, const RowParams& p, float* x,
                int32_t* order, uint64_t* mass, const RowOut& out) {
  // Temperature 0: argmax of the logits as given, nothing else.
  if (p.temperature < kGreedyTemperature) {
    const int32_t id = argmax([&](int64_t i) { return logits[i]; }, vocab);
    write_one_hot(out, id, logits[id], vocab);
    return;
  }
  // TemperatureLogitsWarper: x = logit / T.
  for (int64_t i = 0; i < vocab; ++i) x[i] = scaled_logit(logits[i], p.temperature);
  const int32_t top = argmax([&](int64_t i) { return x[i]; }, vocab);
  KeepRule rule;
  rule.max = x[top];
  // No finite largest value (all −inf, or +inf present): no distribution; the argmax.
  if (!std::isfinite(rule.max)) {
    write_one_hot(out, top, x[top], vocab);
    return;
  }
  for (int64_t i = 0; i < vocab; ++i) mass[i] = mass_of(exp_nonpositive(sub_rn(x[i], rule.max)));

  const bool top_k_on = p.top_k > 0 && p.top_k < vocab, top_p_on = p.top_p < 1.0f;
  if (top_k_on || top_p_on) {
    std::iota(order, order + vocab, 0);
    // By key rather than by value: a strict order even with NaN in the row.
    std::sort(order, order + vocab, [&](int32_t a, int32_t b) {
      const uint32_t ka = order_key(x[a]), kb = order_key(x[b]);
      return ka > kb || (ka == kb && a < b);
    });
  }
  // TopKLogitsWarper: keep every token >= the k-th largest value (ties at the boundary stay).
  int64_t kept_k = vocab;  // the top-k set is the prefix order[0, kept_k)
  if (top_k_on) {
    rule.key_k = order_key(x[order[p.top_k - 1]]);
    kept_k = p.top_k;
    while (kept_k < vocab && order_key(x[order[kept_k]]) >= rule.key_k) ++kept_k;
  }
  // TopPLogitsWarper over the top-k set: keep a token while the mass ranked above it is
  // below top_p · (the set's mass); the last kept token fixes the cut.
  if (top_p_on) {
    uint64_t total = 0;
    for (int64_t r = 0; r < kept_k; ++r) total += mass[order[r]];
    const double threshold = top_p_threshold(p.top_p, total);
    uint64_t above = 0;
    int64_t last = 0;
    for (int64_t r = 0; r < kept_k && below_threshold(above, threshold); ++r) {
      last = r;
      above += mass[order[r]];
    }
    rule.key_p = order_key(x[order[last]]);
    rule.id_cut = int64_t{order[last]} + 1;
  }
  // MinPLogitsWarper: remove probability < min_p · max probability, i.e. exp(x − max) < min_p.
  rule.min_p = p.min_p;

  uint64_t kept_total = 0;
  for (int64_t i = 0; i < vocab; ++i) {
    if (!rule.kept(x[i], i, exp_nonpositive(sub_rn(x[i], rule.max))))
      mass[i] = UINT64_MAX;
    else
      kept_total += mass[i];
  }
  // The draw: inverse CDF over the kept masses in id order at an integer target below the
  // total, from the request's (seed, position).
  if (out.id) {
    const uint64_t target = counter_below(p.seed, p.position, 0, kept_total);
    uint64_t cumulative = 0;
    int32_t id = top;
    for (int64_t i = 0; i < vocab; ++i) {
      if (mass[i] == UINT64_MAX) continue;
      cumulative += mass[i];
      if (cumulative > target) {
        id = static_cast<int32_t>(i);
        break;
      }
    }
    *out.id = id;
  }
  if (out.scores) {
    for (int64_t i = 0; i < vocab; ++i) {
      const bool kept = mass[i] != UINT64_MAX;
      out.scores[i] = kept ? x[i] : -INFINITY;
      out.probs[i] = kept ? probability(mass[i], kept_total) : 0.0f;
    }
  }
}

}  // namespace

void sample_rows_cpu(const Tensor& logits, const SamplingTensors& params, const Tensor& out_ids,
                     const Tensor& out_scores, const Tensor& out_probs, const Tensor& workspace) {
  const int64_t batch = logits.size(0), vocab = logits.size(1);
  const bool bf16 = logits.dtype() == DType::BF16;
  const float* temperature = params.temperature.data<float>();  // (B)
  const int32_t* top_k = params.top_k.data<int32_t>();          // (B)
  const float* top_p = params.top_p.data<float>();              // (B)
  const float* min_p = params.min_p.data<float>();              // (B)
  const bool draw = out_ids.defined();
  uint8_t* ws = workspace.data<uint8_t>();  // (B, V) x F32 | (B, V) order I32 | (B, V) mass U64
  float* x_all = reinterpret_cast<float*>(ws);
  int32_t* order_all = reinterpret_cast<int32_t*>(ws + batch * vocab * 4);
  uint64_t* mass_all = reinterpret_cast<uint64_t*>(ws + batch * vocab * 8);
#pragma omp parallel for schedule(dynamic)
  for (int64_t b = 0; b < batch; ++b) {
    RowLogits row;
    if (bf16)
      row.bf16 = logits.data<uint16_t>() + b * vocab;
    else
      row.f32 = logits.data<float>() + b * vocab;
    RowParams p{temperature[b], top_p[b], min_p[b], top_k[b], 0, 0};
    if (draw) {
      p.seed = static_cast<uint64_t>(params.seed.data<int64_t>()[b]);
      p.position = params.position.dtype() == DType::I64
                       ? static_cast<uint64_t>(params.position.data<int64_t>()[b])
                       : static_cast<uint64_t>(int64_t{params.position.data<int32_t>()[b]});
    }
    RowOut out{draw ? out_ids.data<int32_t>() + b : nullptr,
               out_scores.defined() ? out_scores.data<float>() + b * vocab : nullptr,
               out_probs.defined() ? out_probs.data<float>() + b * vocab : nullptr};
    sample_row(row, vocab, p, x_all + b * vocab, order_all + b * vocab, mass_all + b * vocab, out);
  }
}

}  // namespace microllm::ops
