// Engine: the one inference loop that `generate`, `chat` and (later) `serve` drive
// (INFERENCE.md). Requests go in as token ids with sampling parameters; each step()
// schedules, runs one flattened DecoderStep over every scheduled sequence, samples on the
// device, and hands back one token per sequence that sampled. The engine knows no text.
//
// On CUDA, with options.cuda_graphs, every batch bucket's decode step is captured as a CUDA
// graph at construction (DecodeGraphs); a step of one new token per sequence without
// penalties is padded to its bucket and replays the graph — the same kernels, so the same
// bits as the eager launches of the same step. Other steps (prefill, penalties) run eagerly.
//
// Per step (graph-free path, DESIGN §3): the scheduler picks sequences and allocates their
// KV blocks; the step's inputs are packed into one pinned host buffer and sent with one
// host→device copy; the model runs; penalties, the sampler and the logprobs run on the
// device; one device→host copy brings the ids back, and the host waits once for it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "microllm/infer/sampling_params.h"
#include "microllm/model/weights.h"

namespace microllm::infer {

struct EngineOptions {
  DType kv_dtype = DType::F32;  // F32 or BF16 cache (attention accumulates in F32)
  int64_t block_size = 16;      // BS, tokens per KV block
  int64_t kv_memory_bytes = 0;  // KV pool size; 0: kv_memory_fraction of free memory on
                                // CUDA, enough for max_num_seqs full contexts (≤ 2 GiB) on CPU
  double kv_memory_fraction = 0.9;        // of the free device memory after weights + workspace
  int64_t max_num_seqs = 64;              // sequences in one step
  int64_t max_num_batched_tokens = 4096;  // new tokens in one step (the token budget)
  int64_t prefill_chunk = 2048;           // prompt tokens of one sequence in one step
  int64_t max_model_len = 0;              // context length; 0: max_position_embeddings
  std::vector<int32_t> eos_token_ids;     // generation stops on any (unless ignore_eos)
  bool batch_invariant = true;            // GEMM plans independent of the row count
  bool cuda_graphs = true;     // CUDA: decode steps replay graphs captured at construction
  bool prefix_caching = true;  // reuse the KV blocks of cached prompt prefixes (Scheduler)
};

// One sampled token of one request.
struct TokenOutput {
  int64_t request_id = 0;
  int32_t token = 0;
  float logprob = 0.0f;  // of `token`, raw model distribution; NaN when no sequence of the
                         // step asked for logprobs (params.logprobs ≥ 0), as none were computed
  std::vector<std::pair<int32_t, float>> top_logprobs;  // when params.logprobs > 0
  bool finished = false;
  std::string finish_reason;         // "stop" | "length" once finished
  int64_t cached_prompt_tokens = 0;  // prompt tokens the prefix cache served at admission
};

struct EngineStats {
  int64_t steps = 0;
  int64_t prompt_tokens = 0;  // prefilled (recomputed ones counted again)
  int64_t generated_tokens = 0;
  int64_t preemptions = 0;
  int64_t graph_steps = 0;           // steps that replayed a decode graph
  int64_t prefix_cache_queries = 0;  // tokens looked up in the prefix cache at admissions
  int64_t prefix_cache_hits = 0;     // of those, tokens found cached (not computed)
  double host_seconds = 0.0;         // in step(), outside the device wait
  double launch_seconds = 0.0;       // of those, the upload of a step's inputs and the launch of
                                     // its work (a graph replay or the eager launches)
};

class Engine {
 public:
  Engine(std::shared_ptr<const model::ModelWeights> weights, EngineOptions options);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Validates the request (ids inside the vocabulary, prompt shorter than the context,
  // the parameters) and queues it; returns its id. Error on bad input, nothing queued.
  // `after`: the id of a request with the same prompt (the first of n choices); this one is
  // admitted once that one has its prompt's K/V, so the prefix cache shares the prompt's
  // full blocks instead of computing them again (−1: no such wait).
  int64_t add_request(std::vector<int32_t> prompt_ids, SamplingParams params, int64_t after = -1);
  // Drops a request (waiting or running) and frees its blocks; unknown ids are ignored.
  void abort(int64_t request_id);
  // One engine step; empty when nothing is left to run.
  std::vector<TokenOutput> step();
  bool has_unfinished() const;

  const EngineStats& stats() const;
  // Kernels, copies and memsets one decode step of num_seqs sequences without logprobs
  // launches (CUDA: the nodes of its graph, or of one capture of the eager step; 0 on the CPU).
  int64_t kernels_per_decode_step(int64_t num_seqs) const;
  int64_t max_model_len() const;
  int64_t num_kv_blocks() const;
  int64_t num_free_kv_blocks() const;    // free, or held by the prefix cache alone
  int64_t num_cached_kv_blocks() const;  // in the prefix cache (held by requests or not)
  int64_t num_waiting_requests() const;
  int64_t num_running_requests() const;
  int64_t kv_cache_bytes() const;
  const model::ModelWeights& weights() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace microllm::infer
