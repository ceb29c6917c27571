// Helpers shared by the sampling and penalty tests (CPU and CUDA): per-row parameter specs
// turned into the (B) tensors the ops take, preallocated outputs, and an independent naive
// reference of transformers' filters in F64 (sort, softmax, cumulative sums), written from
// the processors' definitions without the kernels' fixed-point masses or thresholds.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <vector>

#include "microllm/core/random.h"
#include "microllm/core/tensor.h"
#include "microllm/ops/sampling.h"

namespace microllm::testing::sampling {

// One row's parameters.
struct RowSpec {
  float temperature = 1.0f;
  int32_t top_k = 0;
  float top_p = 1.0f;
  float min_p = 0.0f;
  int64_t seed = 0;
  int64_t position = 0;
};

inline ops::SamplingTensors make_params(const std::vector<RowSpec>& rows, Device device,
                                        DType position_dtype = DType::I64) {
  std::vector<double> temperature, top_p, min_p;
  std::vector<int64_t> top_k, seed, position;
  for (const RowSpec& r : rows) {
    temperature.push_back(r.temperature);
    top_k.push_back(r.top_k);
    top_p.push_back(r.top_p);
    min_p.push_back(r.min_p);
    seed.push_back(r.seed);
    position.push_back(r.position);
  }
  const int64_t b = static_cast<int64_t>(rows.size());
  ops::SamplingTensors p;
  p.temperature = Tensor::from_vector(temperature, {b}, DType::F32, device);
  p.top_k = Tensor::from_vector(top_k, {b}, DType::I32, device);
  p.top_p = Tensor::from_vector(top_p, {b}, DType::F32, device);
  p.min_p = Tensor::from_vector(min_p, {b}, DType::F32, device);
  p.seed = Tensor::from_vector(seed, {b}, DType::I64, device);
  p.position = Tensor::from_vector(position, {b}, position_dtype, device);
  return p;
}

inline Tensor workspace_for(int64_t batch, int64_t vocab, Device device) {
  return ops::sample_workspace(batch, vocab, device);
}

// (B, V) F32 normal logits with standard deviation `scale`.
inline Tensor random_logits(int64_t batch, int64_t vocab, uint64_t seed, double scale = 2.0) {
  Generator gen(seed);
  return randn({batch, vocab}, gen, DType::F32, Device::cpu(), 0.0, scale);
}

// ids drawn by ops::sample for `rows` over `logits` (same device).
inline std::vector<int64_t> draw(const Tensor& logits, const std::vector<RowSpec>& rows,
                                 DType position_dtype = DType::I64) {
  const Device device = logits.device();
  const int64_t b = logits.size(0);
  Tensor ids = Tensor::empty({b}, DType::I32, device);
  ops::sample(logits, make_params(rows, device, position_dtype), ids,
              workspace_for(b, logits.size(1), device));
  return ids.to_vector_i64();
}

// The naive reference of one row: the kept set and the renormalized probabilities (F64).
struct Reference {
  std::vector<bool> kept;
  std::vector<double> probs;
};

// Temperature (F32 division, as transformers divides an F32 tensor), top-k (keep ≥ the k-th
// largest value), top-p (sort by value descending, lower id first on ties; keep while the
// probability mass ranked above is < top_p), min-p (keep prob ≥ min_p · max prob).
inline Reference reference_row(const std::vector<float>& logits, const RowSpec& spec) {
  const int64_t v = static_cast<int64_t>(logits.size());
  Reference ref{std::vector<bool>(v, true), std::vector<double>(v, 0.0)};
  if (spec.temperature < ops::kGreedyTemperature) {
    const int64_t best = std::max_element(logits.begin(), logits.end()) - logits.begin();
    for (int64_t i = 0; i < v; ++i) ref.kept[i] = i == best;
    ref.probs[best] = 1.0;
    return ref;
  }
  std::vector<double> x(v);
  for (int64_t i = 0; i < v; ++i) x[i] = static_cast<double>(logits[i] / spec.temperature);
  std::vector<int64_t> order(v);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return x[a] > x[b]; });
  const double max = x[order[0]];
  if (spec.top_k > 0 && spec.top_k < v) {
    const double kth = x[order[spec.top_k - 1]];
    for (int64_t i = 0; i < v; ++i) ref.kept[i] = x[i] >= kth;
  }
  if (spec.top_p < 1.0f) {
    double total = 0.0;
    for (int64_t i = 0; i < v; ++i)
      if (ref.kept[i]) total += std::exp(x[i] - max);
    double above = 0.0;
    for (int64_t i : order) {
      if (!ref.kept[i]) continue;
      if (!(above / total < spec.top_p)) ref.kept[i] = false;
      above += std::exp(x[i] - max);
    }
  }
  for (int64_t i = 0; i < v; ++i)
    if (std::exp(x[i] - max) < spec.min_p) ref.kept[i] = false;
  double total = 0.0;
  for (int64_t i = 0; i < v; ++i)
    if (ref.kept[i]) total += std::exp(x[i] - max);
  for (int64_t i = 0; i < v; ++i) ref.probs[i] = ref.kept[i] ? std::exp(x[i] - max) / total : 0.0;
  return ref;
}

inline std::vector<float> row_of(const Tensor& logits, int64_t b) {
  const std::vector<float> all = logits.to_vector_f32();
  const int64_t v = logits.size(1);
  return std::vector<float>(all.begin() + b * v, all.begin() + (b + 1) * v);
}

}  // namespace microllm::testing::sampling
