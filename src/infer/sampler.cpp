// Sampler (see sampler.h).
#include "microllm/infer/sampler.h"

#include <algorithm>
#include <chrono>
#include <optional>

#include "byte_view.h"
#include "microllm/ops/penalties.h"
#include "microllm/ops/sampling.h"
#if MICROLLM_WITH_CUDA
#include "microllm/cuda/pinned.h"
#include "microllm/cuda/runtime.h"
#endif

namespace microllm::infer {
namespace {

constexpr int64_t kTop = ops::kMaxTopLogprobs;

// Byte offsets of the outputs in their one buffer: ids (B) I32, logprob (B) F32, then the
// top-N ids and logprobs, each dense (B, N) for the step's N (room for N = 20).
struct OutputLayout {
  int64_t ids = 0, logprob = 0, top_ids = 0, top_logprobs = 0, total = 0;
  explicit OutputLayout(int64_t max_seqs) {
    auto align = [](int64_t x) { return (x + 255) / 256 * 256; };
    logprob = align(4 * max_seqs);
    top_ids = logprob + align(4 * max_seqs);
    top_logprobs = top_ids + align(4 * max_seqs * kTop);
    total = top_logprobs + align(4 * max_seqs * kTop);
  }
};

}  // namespace

struct Sampler::State {
  Device device;
  int64_t max_seqs = 0, vocab = 0;
  OutputLayout layout{1};
  Tensor penalized;        // (B, V) F32: the logits the penalties are applied to
  Tensor sample_scratch;   // U8, ops::sample's workspace
  Tensor penalty_scratch;  // U8, grows with the history width
  Tensor outputs;          // (bytes) U8 on the device
  Tensor host_outputs;     // (bytes) U8 on the host (page-locked on CUDA)
#if MICROLLM_WITH_CUDA
  cuda::PinnedBuffer pinned;
#endif
#if MICROLLM_WITH_CUDA
  std::optional<cuda::Event> done;  // CUDA: recorded after the outputs' copy to the host
#endif
  SampledRows rows;
  double wait_seconds = 0.0;
};

Sampler::Sampler(Device device, int64_t max_seqs, int64_t vocab_size)
    : state_(std::make_unique<State>()) {
  State& s = *state_;
  s.device = device;
  s.max_seqs = max_seqs;
  s.vocab = vocab_size;
  s.layout = OutputLayout(max_seqs);
  s.penalized = Tensor::empty({max_seqs, vocab_size}, DType::F32, device);  // (B, V)
  s.sample_scratch = ops::sample_workspace(max_seqs, vocab_size, device);   // (bytes)
  s.outputs = Tensor::empty({s.layout.total}, DType::U8, device);           // (bytes)
  s.host_outputs = s.outputs;
#if MICROLLM_WITH_CUDA
  if (device.is_cuda()) {
    s.pinned.reserve(static_cast<size_t>(s.layout.total));
    s.host_outputs = s.pinned.view({s.layout.total}, DType::U8);
    cuda::set_device(device);
    s.done.emplace();
  }
#endif
}

Sampler::~Sampler() = default;

int64_t Sampler::workspace_bytes() const {
  const State& s = *state_;
  int64_t bytes = static_cast<int64_t>(s.penalized.nbytes() + s.outputs.nbytes());
  if (s.sample_scratch.defined()) bytes += static_cast<int64_t>(s.sample_scratch.nbytes());
  return bytes;
}

double Sampler::last_wait_seconds() const { return state_->wait_seconds; }

void Sampler::enqueue(const Tensor& logits, const SamplerRows& rows) {
  State& s = *state_;
  const int64_t B = logits.size(0), N = rows.top_n;
  MICROLLM_CHECK(B <= s.max_seqs && logits.size(1) == s.vocab && N >= -1 && N <= kTop, "Sampler",
                 "logits ", logits.describe(), " with top ", N, " do not fit a sampler of ",
                 s.max_seqs, " rows and vocabulary ", s.vocab);
  const Tensor ids = byte_view(s.outputs, s.layout.ids, {B}, DType::I32);          // (B)
  const Tensor logprob = byte_view(s.outputs, s.layout.logprob, {B}, DType::F32);  // (B)
  const int64_t Nt = std::max<int64_t>(N, 0);
  const Tensor top_ids = byte_view(s.outputs, s.layout.top_ids, {B, Nt}, DType::I32);      // (B, N)
  const Tensor top_lp = byte_view(s.outputs, s.layout.top_logprobs, {B, Nt}, DType::F32);  // (B, N)

  // Penalties change a copy: the logprobs are those of the raw model distribution.
  Tensor scores = logits;  // (B, V)
  if (rows.history.defined()) {
    scores = s.penalized.narrow(0, 0, B);
    scores.copy_from(logits);
    const auto need = static_cast<int64_t>(ops::penalties_workspace_bytes(B, rows.history.size(1)));
    if (!s.penalty_scratch.defined() || s.penalty_scratch.numel() < need)
      s.penalty_scratch = Tensor::empty({std::max<int64_t>(need, 1)}, DType::U8, s.device);
    ops::apply_penalties(scores, rows.history, rows.prompt_lens,
                         {rows.repetition_penalty, rows.frequency_penalty, rows.presence_penalty},
                         s.penalty_scratch);
  }
  ops::SamplingTensors params;
  params.temperature = rows.temperature;
  params.top_k = rows.top_k;
  params.top_p = rows.top_p;
  params.min_p = rows.min_p;
  params.seed = rows.seed;
  params.position = rows.sample_index;
  ops::sample(scores, params, ids, s.sample_scratch);
  if (N >= 0)  // with no row wanting logprobs, their kernel is not launched
    ops::logprobs(logits, ids, logprob, N > 0 ? top_ids : Tensor(), N > 0 ? top_lp : Tensor());
#if MICROLLM_WITH_CUDA
  // One device→host copy of every output, asynchronous; collect() waits for it.
  if (s.device.is_cuda()) s.pinned.download(s.outputs);
#endif
}

const SampledRows& Sampler::collect(int64_t num_rows, int64_t top_n) {
  State& s = *state_;
  MICROLLM_CHECK(num_rows >= 0 && num_rows <= s.max_seqs && top_n >= -1 && top_n <= kTop, "Sampler",
                 "collect of ", num_rows, " rows with top ", top_n, " from a sampler of ",
                 s.max_seqs, " rows");
  const auto start = std::chrono::steady_clock::now();
#if MICROLLM_WITH_CUDA
  if (s.device.is_cuda()) {
    s.done->record(cuda::current_stream(s.device));
    s.done->synchronize();
  }
#endif
  s.wait_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const auto* base = static_cast<const std::byte*>(s.host_outputs.raw_data());
  auto span_i32 = [&](int64_t offset, int64_t n) {
    return std::span<const int32_t>(reinterpret_cast<const int32_t*>(base + offset),
                                    static_cast<size_t>(n));
  };
  auto span_f32 = [&](int64_t offset, int64_t n) {
    return std::span<const float>(reinterpret_cast<const float*>(base + offset),
                                  static_cast<size_t>(n));
  };
  s.rows.ids = span_i32(s.layout.ids, num_rows);
  const int64_t top = std::max<int64_t>(top_n, 0);
  s.rows.logprob = span_f32(s.layout.logprob, top_n >= 0 ? num_rows : 0);
  s.rows.top_ids = span_i32(s.layout.top_ids, num_rows * top);
  s.rows.top_logprobs = span_f32(s.layout.top_logprobs, num_rows * top);
  s.rows.top_n = top;
  return s.rows;
}

const SampledRows& Sampler::sample(const Tensor& logits, const SamplerRows& rows) {
  enqueue(logits, rows);
  return collect(logits.size(0), rows.top_n);
}

}  // namespace microllm::infer
