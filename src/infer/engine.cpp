// Engine (see engine.h): scheduler → one packed step buffer → DecoderStep → sampler → ids.
#include "microllm/infer/engine.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <limits>

#include "byte_view.h"
#include "microllm/autograd/node.h"
#include "microllm/infer/decode_graphs.h"
#include "microllm/infer/kv_cache.h"
#include "microllm/infer/sampler.h"
#include "microllm/infer/scheduler.h"
#include "microllm/infer/step_inputs.h"
#include "microllm/model/decoder_step.h"
#include "microllm/ops/gemm_mode.h"
#include "microllm/ops/sampling.h"
#if MICROLLM_WITH_CUDA
#include <cuda_runtime_api.h>

#include "microllm/cuda/check.h"
#include "microllm/cuda/pinned.h"
#include "microllm/cuda/runtime.h"
#endif

namespace microllm::infer {
namespace {

constexpr int64_t kGiB = int64_t{1} << 30;

// A host byte buffer the step's inputs are packed into: page-locked on CUDA (so the one
// host→device copy is asynchronous), plain memory on the CPU. `tensor` views it as U8.
class HostBuffer {
 public:
  HostBuffer(Device device, int64_t bytes) : device_(device) { reserve(bytes); }
  void reserve(int64_t bytes) {
    if (bytes <= capacity_) return;
#if MICROLLM_WITH_CUDA
    if (device_.is_cuda()) {
      pinned_.reserve(static_cast<size_t>(bytes));
      tensor_ = pinned_.view({bytes}, DType::U8);
      capacity_ = bytes;
      return;
    }
#endif
    tensor_ = Tensor::empty({bytes}, DType::U8, Device::cpu());  // (bytes)
    capacity_ = bytes;
  }
  std::span<std::byte> bytes(int64_t n) const {
    return {static_cast<std::byte*>(tensor_.raw_data()), static_cast<size_t>(n)};
  }
  const Tensor& tensor() const { return tensor_; }
  // The first dst.nbytes() bytes → the device buffer dst, asynchronously (CUDA only).
  void upload(const Tensor& dst) const {
#if MICROLLM_WITH_CUDA
    pinned_.upload(dst);
#else
    MICROLLM_FAIL("Engine", "no CUDA in this build to upload ", dst.describe());
#endif
  }

 private:
  Device device_;
  int64_t capacity_ = 0;
  Tensor tensor_;  // (capacity) U8
#if MICROLLM_WITH_CUDA
  cuda::PinnedBuffer pinned_;
#endif
};

int64_t kv_pool_bytes(const model::ModelConfig& c, const EngineOptions& o, Device device,
                      int64_t max_model_len, int64_t weight_bytes, int64_t workspace_bytes) {
  const int64_t per_block = KvCache::bytes_per_block(c, o.kv_dtype, o.block_size);
  const int64_t blocks_per_seq = (max_model_len + o.block_size - 1) / o.block_size;
  const int64_t smallest = per_block * blocks_per_seq;  // one sequence of the whole context
  int64_t bytes = o.kv_memory_bytes;
  std::string budget = "--kv-memory";
  if (bytes == 0 && device.is_cuda()) {
#if MICROLLM_WITH_CUDA
    cuda::set_device(device);
    size_t free_bytes = 0, total_bytes = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    bytes = static_cast<int64_t>(static_cast<double>(free_bytes) * o.kv_memory_fraction);
    budget = std::to_string(o.kv_memory_fraction) + " of the free " +
             std::to_string(static_cast<double>(free_bytes) / kGiB) + " GiB";
#endif
  } else if (bytes == 0) {
    bytes = std::min<int64_t>(per_block * blocks_per_seq * o.max_num_seqs, 2 * kGiB);
    budget = "the CPU default";
  }
  MICROLLM_CHECK(bytes >= smallest, "Engine", "the KV cache does not fit: weights ", weight_bytes,
                 " bytes and step workspace ", workspace_bytes, " bytes leave a KV budget of ",
                 bytes, " bytes (", budget, "), but one sequence of the ", max_model_len,
                 "-token context needs ", smallest, " bytes (", blocks_per_seq, " blocks of ",
                 per_block, " bytes); give more --kv-memory or a shorter context");
  return bytes;
}

}  // namespace

struct Engine::State {
  std::shared_ptr<const model::ModelWeights> weights;
  EngineOptions options;
  int64_t max_model_len = 0;
  int64_t max_blocks_per_seq = 0;
  std::unique_ptr<model::DecoderStep> step;
  std::unique_ptr<KvCache> kv;
  std::unique_ptr<Scheduler> scheduler;
  std::unique_ptr<Sampler> sampler;
  std::unique_ptr<HostBuffer> host_inputs;
  Tensor device_inputs;  // (bytes) U8, the device copy of the packed step
  Tensor graph_inputs;   // (bytes) U8, the device buffer the decode graphs read (never moves)
  std::vector<int64_t> buckets;  // decode graph buckets; empty: no graphs
#if MICROLLM_WITH_CUDA
  std::unique_ptr<DecodeGraphs> graphs;
#endif
  int64_t next_id = 0;
  EngineStats stats;
};

namespace {

// A packed step's buffer (host bytes on the CPU, their device copy on CUDA) as the model's
// and the sampler's inputs, at the offsets of `layout`.
struct StepViews {
  model::StepBatch batch;
  SamplerRows rows;
};

StepViews step_views(const Tensor& inputs, const StepLayout& layout, int64_t top_n,
                     int64_t max_seq_len, int64_t num_decode_rows) {
  const int64_t N = layout.dims.num_tokens, B = layout.dims.num_seqs, M = layout.dims.max_blocks;
  StepViews v;
  model::StepBatch& sb = v.batch;
  sb.token_ids = byte_view(inputs, layout.token_ids, {N}, DType::I32);
  sb.positions = byte_view(inputs, layout.positions, {N}, DType::I32);
  sb.slot_mapping = byte_view(inputs, layout.slot_mapping, {N}, DType::I32);
  sb.query_starts = byte_view(inputs, layout.query_starts, {B + 1}, DType::I32);
  sb.seq_lens = byte_view(inputs, layout.seq_lens, {B}, DType::I32);
  sb.block_tables = byte_view(inputs, layout.block_tables, {B, M}, DType::I32);
  sb.last_rows = byte_view(inputs, layout.last_rows, {B}, DType::I32);
  sb.num_tokens = N;
  sb.num_seqs = B;
  sb.max_seq_len = max_seq_len;
  sb.num_decode_rows = num_decode_rows;
  SamplerRows& rows = v.rows;
  rows.temperature = byte_view(inputs, layout.temperature, {B}, DType::F32);
  rows.top_k = byte_view(inputs, layout.top_k, {B}, DType::I32);
  rows.top_p = byte_view(inputs, layout.top_p, {B}, DType::F32);
  rows.min_p = byte_view(inputs, layout.min_p, {B}, DType::F32);
  rows.repetition_penalty = byte_view(inputs, layout.repetition_penalty, {B}, DType::F32);
  rows.frequency_penalty = byte_view(inputs, layout.frequency_penalty, {B}, DType::F32);
  rows.presence_penalty = byte_view(inputs, layout.presence_penalty, {B}, DType::F32);
  rows.seed = byte_view(inputs, layout.seed, {B}, DType::I64);  // U64 bits
  rows.sample_index = byte_view(inputs, layout.sample_index, {B}, DType::I32);
  rows.prompt_lens = byte_view(inputs, layout.prompt_lens, {B}, DType::I32);
  if (layout.dims.history_len > 0)
    rows.history = byte_view(inputs, layout.history, {B, layout.dims.history_len}, DType::I32);
  rows.top_n = top_n;
  return v;
}

// The layout of a decode step padded to a graph bucket of B sequences.
[[maybe_unused]] StepLayout bucket_layout(int64_t bucket, int64_t max_blocks) {
  return step_layout({bucket, bucket, max_blocks, /*history_len=*/0});
}

// Launches one step: the model over the packed inputs, then the sampler. The GEMM mode and
// autograd are set by the caller.
void launch_step(const model::DecoderStep& step, const KvCache& kv, Sampler& sampler,
                 const StepViews& v) {
  const Tensor logits = step.forward(v.batch, kv.layers());  // (B, V)
  sampler.enqueue(logits, v.rows);
}

ops::GemmMode engine_gemm_mode(const EngineOptions& o) {
  // Batch-invariant GEMMs: a row's logits do not depend on how many rows share the step.
  return o.batch_invariant ? ops::GemmMode::batch_invariant : ops::gemm_mode();
}

}  // namespace

Engine::Engine(std::shared_ptr<const model::ModelWeights> weights, EngineOptions options)
    : state_(std::make_unique<State>()) {
  State& s = *state_;
  MICROLLM_CHECK(weights != nullptr, "Engine", "no weights given");
  const model::ModelConfig& c = weights->config();
  const Device device = weights->device();
  s.weights = std::move(weights);
  s.options = std::move(options);
  const EngineOptions& o = s.options;
  MICROLLM_CHECK(
      o.block_size > 0 && o.max_num_seqs > 0 && o.max_num_batched_tokens > 0 && o.prefill_chunk > 0,
      "Engine", "block size, max_num_seqs, max_num_batched_tokens and prefill_chunk ",
      "must be positive, found ", o.block_size, ", ", o.max_num_seqs, ", ",
      o.max_num_batched_tokens, ", ", o.prefill_chunk);
  s.max_model_len = o.max_model_len > 0 ? o.max_model_len : c.max_position_embeddings;
  MICROLLM_CHECK(s.max_model_len > 1, "Engine", "the context length must be > 1, found ",
                 s.max_model_len, " (config max_position_embeddings ", c.max_position_embeddings,
                 ")");
  s.max_blocks_per_seq = (s.max_model_len + o.block_size - 1) / o.block_size;
  const int64_t max_tokens = std::max(o.max_num_batched_tokens, o.max_num_seqs);
  s.step = std::make_unique<model::DecoderStep>(
      *s.weights,
      model::StepLimits{max_tokens, o.max_num_seqs, s.max_blocks_per_seq, o.block_size});
  s.sampler = std::make_unique<Sampler>(device, o.max_num_seqs, c.vocab_size);
  const int64_t workspace = s.step->workspace_bytes() + s.sampler->workspace_bytes();
  const int64_t pool_bytes = kv_pool_bytes(
      c, o, device, s.max_model_len, static_cast<int64_t>(s.weights->flat().nbytes()), workspace);
  const int64_t num_blocks = std::min<int64_t>(
      KvCache::blocks_for_bytes(c, o.kv_dtype, o.block_size, pool_bytes), INT32_MAX / o.block_size);
  s.kv = std::make_unique<KvCache>(c, device, o.kv_dtype, o.block_size, num_blocks);
  SchedulerConfig sc;
  sc.max_num_seqs = o.max_num_seqs;
  sc.max_num_batched_tokens = max_tokens;
  sc.prefill_chunk = o.prefill_chunk;
  sc.block_size = static_cast<int32_t>(o.block_size);
  sc.num_blocks = static_cast<int32_t>(num_blocks);
  sc.max_model_len = s.max_model_len;
  sc.prefix_caching = o.prefix_caching;
  s.scheduler = std::make_unique<Scheduler>(sc, o.eos_token_ids);
  // Buffers for the largest step without penalty history; a step that needs more grows them.
  const StepLayout largest =
      step_layout({max_tokens, o.max_num_seqs, s.max_blocks_per_seq, /*history_len=*/0});
  s.host_inputs = std::make_unique<HostBuffer>(device, largest.total_bytes);
  s.device_inputs = Tensor::empty({largest.total_bytes}, DType::U8, device);  // (bytes)
#if MICROLLM_WITH_CUDA
  if (device.is_cuda() && o.cuda_graphs) {
    s.buckets = decode_buckets(o.max_num_seqs);
    const int64_t bytes = bucket_layout(s.buckets.back(), s.max_blocks_per_seq).total_bytes;
    s.graph_inputs = Tensor::empty({bytes}, DType::U8, device);  // (bytes)
    autograd::NoGradGuard no_grad;
    const ops::GemmModeGuard gemm_mode(engine_gemm_mode(o));
    s.graphs =
        std::make_unique<DecodeGraphs>(device, s.buckets, [&s](int64_t bucket, int64_t top_n) {
          const StepLayout layout = bucket_layout(bucket, s.max_blocks_per_seq);
          launch_step(*s.step, *s.kv, *s.sampler,
                      step_views(s.graph_inputs, layout, top_n, /*max_seq_len=*/0, bucket));
        });
  }
#endif
}

Engine::~Engine() = default;

int64_t Engine::add_request(std::vector<int32_t> prompt_ids, SamplingParams params, int64_t after) {
  State& s = *state_;
  const int64_t V = s.weights->config().vocab_size;
  MICROLLM_CHECK(!prompt_ids.empty(), "Engine", "the prompt is empty");
  for (size_t i = 0; i < prompt_ids.size(); ++i)
    MICROLLM_CHECK(prompt_ids[i] >= 0 && prompt_ids[i] < V, "Engine", "prompt id ", prompt_ids[i],
                   " at position ", i, " is outside the vocabulary [0, ", V, ")");
  MICROLLM_CHECK(static_cast<int64_t>(prompt_ids.size()) < s.max_model_len, "Engine",
                 "the prompt of ", prompt_ids.size(), " tokens does not fit the context of ",
                 s.max_model_len, " tokens (at least one token must be generated)");
  validate(params, V);
  Sequence seq;
  seq.id = s.next_id++;
  seq.prompt_ids = std::move(prompt_ids);
  seq.params = std::move(params);
  seq.after_id = after;
  s.scheduler->add(std::move(seq));
  return s.next_id - 1;
}

void Engine::abort(int64_t request_id) { state_->scheduler->abort(request_id); }

bool Engine::has_unfinished() const { return state_->scheduler->has_unfinished(); }

std::vector<TokenOutput> Engine::step() {
  State& s = *state_;
  autograd::NoGradGuard no_grad;
  const ops::GemmModeGuard gemm_mode(engine_gemm_mode(s.options));
  const auto start = std::chrono::steady_clock::now();
  ScheduledBatch batch = s.scheduler->schedule();
  if (batch.empty()) return {};
  // Sequences with one new token first: their rows are the step's decode rows (StepBatch).
  std::stable_partition(batch.seqs.begin(), batch.seqs.end(),
                        [](const ScheduledSeq& q) { return q.num_new_tokens == 1; });
  int64_t num_decode_rows = 0;
  while (num_decode_rows < batch.num_seqs() &&
         batch.seqs[static_cast<size_t>(num_decode_rows)].num_new_tokens == 1)
    ++num_decode_rows;
  const Device device = s.weights->device();
  int64_t top_n = -1;  // logprobs wanted by any sequence (−1: none, so none are computed)
  for (const ScheduledSeq& q : batch.seqs) top_n = std::max<int64_t>(top_n, q.seq->params.logprobs);

  // 1. Pack the step into the host buffer (padded to a graph bucket when one serves it).
  StepDims dims = step_dims(batch, {0, 0, s.max_blocks_per_seq, -1});
  const int64_t B = dims.num_seqs;
  const int64_t bucket = graphable_step(dims.num_tokens, B, dims.history_len)
                             ? bucket_for(s.buckets, B)
                             : 0;  // 0: eager
  if (bucket > 0) dims = step_dims(batch, {bucket, bucket, s.max_blocks_per_seq, 0});
  const StepLayout layout = step_layout(dims);
  s.host_inputs->reserve(layout.total_bytes);
  pack_step(batch, static_cast<int32_t>(s.options.block_size), layout,
            s.host_inputs->bytes(layout.total_bytes));

  // 2. One copy to the device; the model, penalties, sampling and logprobs there (a graph
  //    replay or eager launches); one copy back and one wait.
  const SampledRows* sampled = nullptr;
  const auto launch_start = std::chrono::steady_clock::now();
  auto launched = [&] {
    s.stats.launch_seconds +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - launch_start).count();
  };
  if (bucket > 0) {
#if MICROLLM_WITH_CUDA
    s.host_inputs->upload(s.graph_inputs.narrow(0, 0, layout.total_bytes));
    s.graphs->replay(bucket, top_n);
    launched();
    sampled = &s.sampler->collect(B, DecodeGraphs::captured_top_n(top_n));
#endif
  } else {
    Tensor inputs = s.host_inputs->tensor();  // CPU: the packed bytes themselves
    if (device.is_cuda()) {
      if (s.device_inputs.numel() < layout.total_bytes)
        s.device_inputs = Tensor::empty({layout.total_bytes}, DType::U8, device);  // (bytes)
      s.host_inputs->upload(s.device_inputs.narrow(0, 0, layout.total_bytes));
      inputs = s.device_inputs;
    }
    int64_t max_seq_len = 0;
    for (const ScheduledSeq& q : batch.seqs)
      max_seq_len = std::max(max_seq_len, q.start_position + q.num_new_tokens);
    launch_step(*s.step, *s.kv, *s.sampler,
                step_views(inputs, layout, top_n, max_seq_len, num_decode_rows));
    launched();
    sampled = &s.sampler->collect(B, top_n);
  }

  // 3. Hand the ids to the scheduler; report the rows that sampled.
  std::vector<int32_t> ids(sampled->ids.begin(), sampled->ids.begin() + B);
  std::vector<TokenOutput> out;
  for (int64_t b = 0; b < B; ++b) {
    const ScheduledSeq& q = batch.seqs[static_cast<size_t>(b)];
    if (!q.sample) continue;
    TokenOutput t;
    t.request_id = q.seq_id;
    t.token = ids[static_cast<size_t>(b)];
    t.logprob = sampled->logprob.empty() ? std::numeric_limits<float>::quiet_NaN()
                                         : sampled->logprob[static_cast<size_t>(b)];
    t.cached_prompt_tokens = q.seq->num_prefix_hit_tokens;
    const int32_t n = q.seq->params.logprobs;
    for (int32_t j = 0; j < n; ++j)
      t.top_logprobs.push_back(
          {sampled->top_ids[static_cast<size_t>(b * sampled->top_n + j)],
           sampled->top_logprobs[static_cast<size_t>(b * sampled->top_n + j)]});
    out.push_back(std::move(t));
  }
  for (const ScheduledSeq& q : batch.seqs)  // prefill (and recompute) tokens of the step
    if (q.num_new_tokens > 1 || q.start_position < q.seq->num_prompt_tokens())
      s.stats.prompt_tokens += q.num_new_tokens;
  const std::vector<Sequence> finished = s.scheduler->update(batch, ids);
  for (TokenOutput& t : out)
    for (const Sequence& f : finished)
      if (f.id == t.request_id) {
        t.finished = true;
        t.finish_reason = to_string(f.finish_reason);
      }
  s.stats.steps += 1;
  s.stats.generated_tokens += static_cast<int64_t>(out.size());
  s.stats.preemptions = s.scheduler->num_preemptions();
  s.stats.prefix_cache_queries = s.scheduler->prefix_cache_queries();
  s.stats.prefix_cache_hits = s.scheduler->prefix_cache_hits();
  s.stats.host_seconds +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() -
      s.sampler->last_wait_seconds();
  if (bucket > 0) s.stats.graph_steps += 1;
  return out;
}

int64_t Engine::kernels_per_decode_step(int64_t num_seqs) const {
  const State& s = *state_;
  MICROLLM_CHECK(num_seqs >= 1 && num_seqs <= s.options.max_num_seqs, "Engine", "a decode step of ",
                 num_seqs, " sequences is outside [1, ", s.options.max_num_seqs, "]");
#if MICROLLM_WITH_CUDA
  if (s.weights->device().is_cuda()) {
    if (s.graphs) return s.graphs->num_nodes(bucket_for(s.buckets, num_seqs));
    // The eager path launches what a graph of the unpadded step would hold: count one
    // capture of it (never replayed, so the buffer's contents do not matter).
    autograd::NoGradGuard no_grad;
    const ops::GemmModeGuard gemm_mode(engine_gemm_mode(s.options));
    const StepLayout layout = bucket_layout(num_seqs, s.max_blocks_per_seq);
    return DecodeGraphs::count_nodes(s.weights->device(), [&] {
      launch_step(*s.step, *s.kv, *s.sampler,
                  step_views(s.device_inputs, layout, -1, s.max_model_len, num_seqs));
    });
  }
#endif
  return 0;
}

const EngineStats& Engine::stats() const { return state_->stats; }
int64_t Engine::max_model_len() const { return state_->max_model_len; }
int64_t Engine::num_kv_blocks() const { return state_->kv->num_blocks(); }
int64_t Engine::num_free_kv_blocks() const { return state_->scheduler->num_free_blocks(); }
int64_t Engine::num_cached_kv_blocks() const {
  return state_->scheduler->prefix_cache().num_cached();
}
int64_t Engine::num_waiting_requests() const { return state_->scheduler->num_waiting(); }
int64_t Engine::num_running_requests() const { return state_->scheduler->num_running(); }
int64_t Engine::kv_cache_bytes() const { return state_->kv->bytes(); }
const model::ModelWeights& Engine::weights() const { return *state_->weights; }

}  // namespace microllm::infer
