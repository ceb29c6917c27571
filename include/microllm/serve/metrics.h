// Server metrics in the Prometheus text format, with vLLM's meanings and a `microllm:`
// prefix (vLLM docs/design/metrics.md): gauges from the engine loop's snapshot, counters of
// tokens and finished requests, and latency histograms. Handler threads record; /metrics
// renders.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>

#include "microllm/serve/engine_loop.h"

namespace microllm::serve {

// A cumulative histogram over fixed upper bounds (seconds).
class Histogram {
 public:
  static constexpr std::array<double, 14> kBounds = {0.001, 0.005, 0.01, 0.025, 0.05, 0.1,  0.25,
                                                     0.5,   1.0,   2.5,  5.0,   10.0, 30.0, 60.0};
  void observe(double seconds);
  // "name_bucket{le=…} n", "name_sum", "name_count" lines.
  std::string render(const std::string& name, const std::string& help) const;

 private:
  std::array<int64_t, kBounds.size()> buckets_{};
  int64_t count_ = 0;
  double sum_ = 0.0;
};

// One finished request (any finish reason: "stop", "length", "abort", "error").
struct FinishedRequest {
  std::string finish_reason;
  int64_t prompt_tokens = 0, generation_tokens = 0;
  double queue_seconds = 0.0, first_token_seconds = -1.0, e2e_seconds = 0.0;  // −1: no token
  // HTTP-thread work of the request, off the engine thread: building the prompt ids (chat
  // template, tokenizer) and turning tokens into text (detokenizer, stop strings, logprobs).
  double tokenize_seconds = 0.0, detokenize_seconds = 0.0;
};

class Metrics {
 public:
  void request_done(const FinishedRequest& r);
  void inter_token(double seconds);
  std::string render(const LoopSnapshot& loop) const;

 private:
  mutable std::mutex mutex_;
  int64_t prompt_tokens_ = 0, generation_tokens_ = 0;
  double tokenize_seconds_ = 0.0, detokenize_seconds_ = 0.0;
  std::map<std::string, int64_t> finished_;  // by finish reason
  Histogram ttft_, itl_, e2e_, queue_;
};

}  // namespace microllm::serve
