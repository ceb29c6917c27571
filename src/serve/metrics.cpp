// Metrics (see metrics.h).
#include "microllm/serve/metrics.h"

#include <cstdio>

namespace microllm::serve {
namespace {

std::string number(double v) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.9g", v);
  return buffer;
}

std::string metric(const std::string& name, const std::string& type, const std::string& help,
                   const std::string& value) {
  return "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n" + name + " " +
         value + "\n";
}

}  // namespace

void Histogram::observe(double seconds) {
  for (size_t i = 0; i < kBounds.size(); ++i)
    if (seconds <= kBounds[i]) ++buckets_[i];
  ++count_;
  sum_ += seconds;
}

std::string Histogram::render(const std::string& name, const std::string& help) const {
  std::string out = "# HELP " + name + " " + help + "\n# TYPE " + name + " histogram\n";
  for (size_t i = 0; i < kBounds.size(); ++i)
    out +=
        name + "_bucket{le=\"" + number(kBounds[i]) + "\"} " + std::to_string(buckets_[i]) + "\n";
  out += name + "_bucket{le=\"+Inf\"} " + std::to_string(count_) + "\n";
  out += name + "_sum " + number(sum_) + "\n" + name + "_count " + std::to_string(count_) + "\n";
  return out;
}

void Metrics::request_done(const FinishedRequest& r) {
  std::lock_guard lock(mutex_);
  ++finished_[r.finish_reason];
  prompt_tokens_ += r.prompt_tokens;
  generation_tokens_ += r.generation_tokens;
  tokenize_seconds_ += r.tokenize_seconds;
  detokenize_seconds_ += r.detokenize_seconds;
  queue_.observe(r.queue_seconds);
  if (r.first_token_seconds >= 0.0) ttft_.observe(r.first_token_seconds);
  e2e_.observe(r.e2e_seconds);
}

void Metrics::inter_token(double seconds) {
  std::lock_guard lock(mutex_);
  itl_.observe(seconds);
}

std::string Metrics::render(const LoopSnapshot& loop) const {
  std::lock_guard lock(mutex_);
  const double usage = loop.kv_blocks_total > 0 ? static_cast<double>(loop.kv_blocks_used) /
                                                      static_cast<double>(loop.kv_blocks_total)
                                                : 0.0;
  std::string out;
  out += metric("microllm:num_requests_running", "gauge",
                "Requests in model execution batches (admitted, KV blocks allocated).",
                std::to_string(loop.running));
  out +=
      metric("microllm:num_requests_waiting", "gauge",
             "Requests waiting to be admitted (new or preempted).", std::to_string(loop.waiting));
  out += metric("microllm:kv_cache_usage_perc", "gauge",
                "Fraction of KV-cache blocks held by requests (1 = full; blocks only the prefix "
                "cache holds count as free).",
                number(usage));
  out += metric("microllm:prefix_cache_blocks", "gauge", "KV-cache blocks in the prefix cache.",
                std::to_string(loop.kv_blocks_cached));
  out += metric("microllm:prefix_cache_queries_total", "counter",
                "Prompt tokens looked up in the prefix cache (at every admission).",
                std::to_string(loop.prefix_cache_queries));
  out += metric("microllm:prefix_cache_hits_total", "counter",
                "Of those, tokens found in the prefix cache (not computed).",
                std::to_string(loop.prefix_cache_hits));
  out += metric("microllm:num_preemptions_total", "counter",
                "Requests preempted (blocks freed, recomputed later).",
                std::to_string(loop.preemptions));
  out += metric("microllm:prompt_tokens_total", "counter", "Prompt tokens of finished requests.",
                std::to_string(prompt_tokens_));
  out += metric("microllm:generation_tokens_total", "counter",
                "Generated tokens of finished requests.", std::to_string(generation_tokens_));
  out += metric("microllm:tokenize_seconds_total", "counter",
                "HTTP-thread time building the prompt ids (chat template, tokenizer) of finished "
                "requests.",
                number(tokenize_seconds_));
  out += metric("microllm:detokenize_seconds_total", "counter",
                "HTTP-thread time turning the tokens of finished requests into text (detokenizer, "
                "stop strings, logprobs).",
                number(detokenize_seconds_));
  out += metric("microllm:engine_steps_total", "counter", "Engine steps run.",
                std::to_string(loop.steps));
  out += metric("microllm:engine_step_seconds_total", "counter",
                "Engine-thread time inside engine steps (model, sampler, scheduler).",
                number(loop.step_seconds));
  out +=
      "# HELP microllm:request_success_total Finished requests by finish reason.\n"
      "# TYPE microllm:request_success_total counter\n";
  for (const auto& [reason, n] : finished_)
    out += "microllm:request_success_total{finished_reason=\"" + reason + "\"} " +
           std::to_string(n) + "\n";
  out += ttft_.render("microllm:time_to_first_token_seconds", "Time to the first token.");
  out += itl_.render("microllm:inter_token_latency_seconds", "Time between streamed tokens.");
  out += e2e_.render("microllm:e2e_request_latency_seconds", "Request arrival to its end.");
  out += queue_.render("microllm:request_queue_time_seconds",
                       "Request arrival until the engine took it.");
  return out;
}

}  // namespace microllm::serve
