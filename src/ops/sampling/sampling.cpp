// Sampling operators: host validation of shapes, dtypes and devices, then dispatch; and the
// host-side check of parameter values (validate_sampling_params). Nothing here allocates a
// tensor or reads device memory, so the ops can run inside a captured CUDA graph.
#include "microllm/ops/sampling.h"

#include <cmath>
#include <initializer_list>
#include <string>

#include "../common.h"
#include "sampling_kernels.h"

namespace microllm::ops {
namespace {

std::string dtype_list(std::initializer_list<DType> dtypes) {
  std::string out;
  for (DType d : dtypes) out += (out.empty() ? "" : " or ") + std::string(dtype_name(d));
  return out;
}

bool one_of(DType dtype, std::initializer_list<DType> dtypes) {
  for (DType d : dtypes)
    if (d == dtype) return true;
  return false;
}

// A dense tensor of `shape` on `device` with one of `dtypes`.
void check_dense(const char* op, const Tensor& t, const char* name, const Shape& shape,
                 std::initializer_list<DType> dtypes, Device device) {
  detail::check_defined(op, t, name);
  MICROLLM_CHECK(t.shape() == shape, op, "'", name, "' must have shape ", shape_str(shape),
                 ", found ", t.describe());
  MICROLLM_CHECK(one_of(t.dtype(), dtypes), op, "'", name, "' must be ", dtype_list(dtypes),
                 ", found ", t.describe());
  MICROLLM_CHECK(t.device() == device, op, "'", name, "' must be on ", device.str(),
                 " like the other operands, found ", t.describe());
  MICROLLM_CHECK(t.is_contiguous(), op, "'", name, "' must be dense (no copy is made), found ",
                 t.describe(), " with strides ", shape_str(t.strides()));
}

// logits (B, V), dense, F32 or BF16; returns {B, V}.
std::pair<int64_t, int64_t> check_logits(const char* op, const Tensor& logits) {
  detail::check_defined(op, logits, "logits");
  detail::check_rank(op, logits, "logits", 2);
  const int64_t batch = logits.size(0), vocab = logits.size(1);
  MICROLLM_CHECK(vocab >= 1 && vocab <= kMaxSamplingVocab, op, "logits need a vocabulary of 1 to ",
                 kMaxSamplingVocab, " entries, found ", logits.describe());
  check_dense(op, logits, "logits", {batch, vocab}, {DType::F32, DType::BF16}, logits.device());
  return {batch, vocab};
}

void check_workspace(const char* op, const Tensor& workspace, size_t bytes, Device device) {
  if (bytes == 0) return;
  detail::check_defined(op, workspace, "workspace");
  MICROLLM_CHECK(workspace.dtype() == DType::U8 && workspace.device() == device &&
                     workspace.is_contiguous() && workspace.nbytes() >= bytes,
                 op, "'workspace' must be a dense u8 tensor of at least ", bytes, " bytes on ",
                 device.str(), " (sample_workspace_bytes), found ", workspace.describe());
  MICROLLM_CHECK(reinterpret_cast<uintptr_t>(workspace.raw_data()) % 8 == 0, op,
                 "'workspace' must start on an 8-byte boundary, found offset ", workspace.offset());
}

void check_params(const char* op, const SamplingTensors& p, int64_t batch, Device device,
                  bool needs_draw) {
  check_dense(op, p.temperature, "temperature", {batch}, {DType::F32}, device);
  check_dense(op, p.top_k, "top_k", {batch}, {DType::I32}, device);
  check_dense(op, p.top_p, "top_p", {batch}, {DType::F32}, device);
  check_dense(op, p.min_p, "min_p", {batch}, {DType::F32}, device);
  if (!needs_draw) return;
  check_dense(op, p.seed, "seed", {batch}, {DType::I64}, device);
  check_dense(op, p.position, "position", {batch}, {DType::I32, DType::I64}, device);
}

}  // namespace

void validate_sampling_params(const SamplingValues& v) {
  const char* op = "sampling_params";
  MICROLLM_CHECK(std::isfinite(v.temperature) && v.temperature >= 0.0f, op,
                 "temperature must be finite and >= 0, found ", v.temperature);
  MICROLLM_CHECK(v.top_k >= 0, op, "top_k must be >= 0 (0 = off), found ", v.top_k);
  MICROLLM_CHECK(v.top_p > 0.0f && v.top_p <= 1.0f, op, "top_p must be in (0, 1], found ", v.top_p);
  MICROLLM_CHECK(v.min_p >= 0.0f && v.min_p <= 1.0f, op, "min_p must be in [0, 1], found ",
                 v.min_p);
  MICROLLM_CHECK(std::isfinite(v.repetition_penalty) && v.repetition_penalty > 0.0f, op,
                 "repetition_penalty must be finite and > 0, found ", v.repetition_penalty);
  MICROLLM_CHECK(std::isfinite(v.frequency_penalty), op, "frequency_penalty must be finite, found ",
                 v.frequency_penalty);
  MICROLLM_CHECK(std::isfinite(v.presence_penalty), op, "presence_penalty must be finite, found ",
                 v.presence_penalty);
  MICROLLM_CHECK(v.top_logprobs >= 0 && v.top_logprobs <= kMaxTopLogprobs, op,
                 "top_logprobs must be in [0, ", kMaxTopLogprobs, "], found ", v.top_logprobs);
}

size_t sample_workspace_bytes(int64_t batch, int64_t vocab, Device device) {
  MICROLLM_CHECK(batch >= 0 && vocab >= 0, "sample_workspace_bytes",
                 "batch and vocab must be >= 0, found ", batch, " and ", vocab);
  // CUDA: the greedy split's best pairs and counters (sampling_kernels.h).
  if (device.is_cuda()) return static_cast<size_t>(batch) * kGreedySplitBytesPerRow;
  // Per row: x (V) F32, order (V) I32, mass (V) U64.
  return static_cast<size_t>(batch) * static_cast<size_t>(vocab) * 16u;
}

Tensor sample_workspace(int64_t batch, int64_t vocab, Device device) {
  const auto bytes = static_cast<int64_t>(sample_workspace_bytes(batch, vocab, device));
  if (bytes == 0) return Tensor();
  return device.is_cuda() ? Tensor::zeros({bytes}, DType::U8, device)
                          : Tensor::empty({bytes}, DType::U8, device);
}

void sample(const Tensor& logits, const SamplingTensors& params, const Tensor& out_ids,
            const Tensor& workspace) {
  const char* op = "sample";
  const auto [batch, vocab] = check_logits(op, logits);
  const Device device = logits.device();
  check_params(op, params, batch, device, true);
  check_dense(op, out_ids, "out_ids", {batch}, {DType::I32}, device);
  check_workspace(op, workspace, sample_workspace_bytes(batch, vocab, device), device);
  if (batch == 0) return;
  MICROLLM_KERNEL(device, sample_rows, logits, params, out_ids, Tensor(), Tensor(), workspace);
}

void sampling_distribution(const Tensor& logits, const SamplingTensors& params,
                           const Tensor& out_scores, const Tensor& out_probs,
                           const Tensor& workspace) {
  const char* op = "sampling_distribution";
  const auto [batch, vocab] = check_logits(op, logits);
  const Device device = logits.device();
  check_params(op, params, batch, device, false);
  check_dense(op, out_scores, "out_scores", {batch, vocab}, {DType::F32}, device);
  check_dense(op, out_probs, "out_probs", {batch, vocab}, {DType::F32}, device);
  check_workspace(op, workspace, sample_workspace_bytes(batch, vocab, device), device);
  if (batch == 0) return;
  MICROLLM_KERNEL(device, sample_rows, logits, params, Tensor(), out_scores, out_probs, workspace);
}

void logprobs(const Tensor& logits, const Tensor& ids, const Tensor& out_logprobs,
              const Tensor& top_ids, const Tensor& top_logprobs) {
  const char* op = "logprobs";
  const auto [batch, vocab] = check_logits(op, logits);
  const Device device = logits.device();
  check_dense(op, ids, "ids", {batch}, {DType::I32}, device);
  check_dense(op, out_logprobs, "out_logprobs", {batch}, {DType::F32}, device);
  MICROLLM_CHECK(top_ids.defined() == top_logprobs.defined(), op,
                 "'top_ids' and 'top_logprobs' must both be given or both be undefined");
  if (top_ids.defined()) {
    detail::check_rank(op, top_ids, "top_ids", 2);
    const int64_t n = top_ids.size(1);
    MICROLLM_CHECK(n <= kMaxTopLogprobs && n <= vocab, op, "at most min(", kMaxTopLogprobs,
                   ", V) top logprobs, found N = ", n, " for ", logits.describe());
    check_dense(op, top_ids, "top_ids", {batch, n}, {DType::I32}, device);
    check_dense(op, top_logprobs, "top_logprobs", {batch, n}, {DType::F32}, device);
  }
  if (batch == 0) return;
  MICROLLM_KERNEL(device, logprobs_rows, logits, ids, out_logprobs, top_ids, top_logprobs);
}

void counter_random(const Tensor& seeds, const Tensor& positions, const Tensor& out) {
  const char* op = "counter_random";
  detail::check_defined(op, out, "out");
  detail::check_rank(op, out, "out", 2);
  const int64_t batch = out.size(0);
  const Device device = out.device();
  check_dense(op, out, "out", out.shape(), {DType::I64, DType::F32, DType::F64}, device);
  check_dense(op, seeds, "seeds", {batch}, {DType::I64}, device);
  check_dense(op, positions, "positions", {batch}, {DType::I32, DType::I64}, device);
  if (out.numel() == 0) return;
  MICROLLM_KERNEL(device, counter_random, seeds, positions, out);
}

}  // namespace microllm::ops
