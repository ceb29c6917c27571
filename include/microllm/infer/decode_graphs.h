// DecodeGraphs: the policy of CUDA-graph decode (INFERENCE.md, "The step, as data"). A step
// in which every sequence has one new token and no row needs a penalty history replays a
// graph captured for its batch bucket: the batch is padded up to the bucket (padded rows
// write nothing and sample greedily, StepInputs), so one graph serves every batch of up to
// that many sequences, whatever their positions, block tables and sampling parameters —
// those live in device buffers the graph reads. Each bucket has three graphs: without
// logprobs (no logprob kernel), with the sampled tokens' logprobs alone, and with the top
// kMaxTopLogprobs as well (a step that wants fewer reads the first ones).
//
// Mechanism apart from policy: cuda/graph captures and replays; this file decides which
// buckets exist and which step replays which; the engine says what one step launches.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "microllm/core/device.h"

namespace microllm::infer {

// The batch buckets for a largest batch of max_num_seqs: 1, 2, 4, ... below it, then
// max_num_seqs itself (so every batch size has a bucket). Error unless max_num_seqs ≥ 1.
std::vector<int64_t> decode_buckets(int64_t max_num_seqs);

// The smallest bucket holding num_seqs sequences; 0 when none does.
int64_t bucket_for(const std::vector<int64_t>& buckets, int64_t num_seqs);

// True when a step of these dimensions can replay a decode graph: one new token per
// sequence (num_tokens == num_seqs) and no penalty history.
bool graphable_step(int64_t num_tokens, int64_t num_seqs, int64_t history_len);

#if MICROLLM_WITH_CUDA
class DecodeGraphs {
 public:
  // What one captured step launches: the model and the sampler for a batch of `bucket`
  // rows with top_n logprobs (−1: none), reading its inputs from the caller's fixed device
  // buffers.
  using StepFn = std::function<void(int64_t bucket, int64_t top_n)>;

  // Captures every bucket's graphs on the device's current stream, largest bucket first
  // (an out-of-memory shows here, at start, not under load).
  DecodeGraphs(Device device, std::vector<int64_t> buckets, const StepFn& step);
  ~DecodeGraphs();
  DecodeGraphs(const DecodeGraphs&) = delete;
  DecodeGraphs& operator=(const DecodeGraphs&) = delete;

  const std::vector<int64_t>& buckets() const { return buckets_; }
  // Launches the graph of `bucket` (one of buckets()) that serves a step wanting top_n
  // logprobs (−1: none; 0: the sampled tokens'; more: the top kMaxTopLogprobs too) on the
  // current stream; returns at once.
  void replay(int64_t bucket, int64_t top_n) const;
  // The top_n a step wanting top_n logprobs is captured with, and reads back.
  static int64_t captured_top_n(int64_t top_n);
  // Nodes (kernels, copies, memsets) of the graph of `bucket` without logprobs.
  int64_t num_nodes(int64_t bucket) const;

  // Nodes of one capture of `fn` (captured, never replayed): the kernels a step launches.
  static int64_t count_nodes(Device device, const std::function<void()>& fn);

 private:
  struct Graphs;
  std::vector<int64_t> buckets_;
  std::vector<std::unique_ptr<Graphs>> graphs_;  // parallel to buckets_
};
#endif

}  // namespace microllm::infer
