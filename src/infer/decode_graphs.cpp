// DecodeGraphs (see decode_graphs.h).
#include "microllm/infer/decode_graphs.h"

#include <algorithm>

#include "microllm/core/error.h"
#include "microllm/ops/sampling.h"
#if MICROLLM_WITH_CUDA
#include "microllm/cuda/graph.h"
#include "microllm/cuda/runtime.h"
#endif

namespace microllm::infer {

std::vector<int64_t> decode_buckets(int64_t max_num_seqs) {
  MICROLLM_CHECK(max_num_seqs >= 1, "decode graphs", "max_num_seqs must be >= 1, found ",
                 max_num_seqs);
  std::vector<int64_t> buckets;
  for (int64_t b = 1; b < max_num_seqs; b *= 2) buckets.push_back(b);
  buckets.push_back(max_num_seqs);
  return buckets;
}

int64_t bucket_for(const std::vector<int64_t>& buckets, int64_t num_seqs) {
  for (int64_t b : buckets)
    if (b >= num_seqs) return b;
  return 0;
}

bool graphable_step(int64_t num_tokens, int64_t num_seqs, int64_t history_len) {
  return num_seqs > 0 && num_tokens == num_seqs && history_len == 0;
}

#if MICROLLM_WITH_CUDA

struct DecodeGraphs::Graphs {
  explicit Graphs(Device device) : plain(device), sampled_logprobs(device), top_logprobs(device) {}
  const cuda::CudaGraph& serving(int64_t top_n) const {
    return top_n < 0 ? plain : top_n == 0 ? sampled_logprobs : top_logprobs;
  }
  cuda::CudaGraph plain;             // top_n = −1: no logprobs
  cuda::CudaGraph sampled_logprobs;  // top_n = 0: the sampled tokens' logprobs
  cuda::CudaGraph top_logprobs;      // top_n = kMaxTopLogprobs
};

DecodeGraphs::DecodeGraphs(Device device, std::vector<int64_t> buckets, const StepFn& step)
    : buckets_(std::move(buckets)) {
  MICROLLM_CHECK(!buckets_.empty(), "decode graphs", "no batch buckets given");
  graphs_.resize(buckets_.size());
  const cuda::Stream stream = cuda::current_stream(device);
  for (size_t i = buckets_.size(); i-- > 0;) {  // largest first
    const int64_t bucket = buckets_[i];
    auto g = std::make_unique<Graphs>(device);
    g->plain.capture(stream, [&] { step(bucket, -1); });
    g->sampled_logprobs.capture(stream, [&] { step(bucket, 0); });
    g->top_logprobs.capture(stream, [&] { step(bucket, ops::kMaxTopLogprobs); });
    graphs_[i] = std::move(g);
  }
}

DecodeGraphs::~DecodeGraphs() = default;

int64_t DecodeGraphs::captured_top_n(int64_t top_n) {
  return top_n > 0 ? ops::kMaxTopLogprobs : std::max<int64_t>(top_n, -1);
}

void DecodeGraphs::replay(int64_t bucket, int64_t top_n) const {
  for (size_t i = 0; i < buckets_.size(); ++i)
    if (buckets_[i] == bucket) {
      const cuda::CudaGraph& g = graphs_[i]->serving(top_n);
      g.replay(cuda::current_stream(g.device()));
      return;
    }
  MICROLLM_FAIL("decode graphs", "no graph was captured for a batch bucket of ", bucket);
}

int64_t DecodeGraphs::num_nodes(int64_t bucket) const {
  for (size_t i = 0; i < buckets_.size(); ++i)
    if (buckets_[i] == bucket) return graphs_[i]->plain.num_nodes();
  return 0;
}

int64_t DecodeGraphs::count_nodes(Device device, const std::function<void()>& fn) {
  cuda::CudaGraph graph(device);
  graph.capture(cuda::current_stream(device), fn);
  return graph.num_nodes();
}

#endif

}  // namespace microllm::infer
