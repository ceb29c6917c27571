// EngineLoop: the one thread that owns the Engine (INFERENCE.md, "engine_loop"). Handler
// threads submit requests and abort them; between steps the loop adds what was submitted
// and applies the aborts, steps while any request is unfinished, and hands every sampled
// token to its request's RequestStream. Nothing else touches the Engine, so the Engine needs
// no lock, and text work (tokenizing, detokenizing, stop strings) stays on the handler
// threads. Requests join and leave at every step (continuous batching): the Engine's
// scheduler takes new prefills alongside running decodes under its token budget.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "microllm/infer/engine.h"

namespace microllm::serve {

// What a request's stream delivers: a token (its `finished` ends the stream), or an error
// (the engine failed or stopped; the stream ends).
struct StreamEvent {
  bool is_error = false;
  infer::TokenOutput token;
  std::string error;

  static StreamEvent of_token(infer::TokenOutput t) {
    StreamEvent e;
    e.token = std::move(t);
    return e;
  }
  static StreamEvent of_error(std::string why) {
    StreamEvent e;
    e.is_error = true;
    e.error = std::move(why);
    return e;
  }
};

// The events of one request, written by the loop, read by one handler thread.
class RequestStream {
 public:
  explicit RequestStream(int64_t id) : id_(id) {}
  int64_t id() const { return id_; }
  // The next event, waiting at most `timeout`; nullopt when none came in time.
  std::optional<StreamEvent> next(std::chrono::milliseconds timeout);
  bool ready();  // an event is waiting
  void push(StreamEvent event);

 private:
  const int64_t id_;
  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<StreamEvent> events_;
};

// Counters the loop publishes after every step, readable from any thread.
// Seconds of the steady clock since `t`.
inline double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

struct LoopSnapshot {
  int64_t requests = 0;          // accepted and not finished (waiting or running)
  int64_t waiting = 0;           // of those, not yet admitted (or preempted)
  int64_t running = 0;           // of those, admitted (their blocks allocated)
  int64_t kv_blocks_used = 0;    // of kv_blocks_total, held by requests
  int64_t kv_blocks_cached = 0;  // in the prefix cache (held by requests or not)
  int64_t kv_blocks_total = 0;
  int64_t steps = 0, prompt_tokens = 0, generated_tokens = 0, preemptions = 0;
  int64_t prefix_cache_queries = 0, prefix_cache_hits = 0;  // tokens
  double step_seconds = 0.0;                                // wall time inside Engine::step, summed
};

class EngineLoop {
 public:
  // Starts the thread. `engine` must outlive the loop.
  explicit EngineLoop(infer::Engine& engine);
  ~EngineLoop();  // stop(), then join
  EngineLoop(const EngineLoop&) = delete;
  EngineLoop& operator=(const EngineLoop&) = delete;

  // Queues a request and waits until the engine took it (at the loop's next turn, before
  // any token). Throws the engine's microllm::Error when it refused the request (an id
  // outside the vocabulary, a prompt too long for the context, bad parameters), and
  // microllm::Error when the loop has stopped.
  std::shared_ptr<RequestStream> submit(std::vector<int32_t> prompt_ids,
                                        infer::SamplingParams params);
  // The n choices of one prompt, one stream each, all accepted or none: choice 0 first, the
  // others admitted once it has the prompt's K/V, so that they share its cached blocks.
  std::vector<std::shared_ptr<RequestStream>> submit_choices(
      std::vector<int32_t> prompt_ids, std::vector<infer::SamplingParams> choices);
  // Ends a request at the loop's next turn and frees its KV blocks; its stream gets nothing
  // more. Unknown or finished ids are ignored.
  void abort(int64_t request_id);
  // Stops the thread after the current step; unfinished streams get an error event.
  void stop();
  // False once stop() was called or a step failed (the server's /health turns 503).
  bool running() const { return running_.load(); }
  // The message of the step failure that stopped the loop; empty when none did.
  std::string failure() const;
  LoopSnapshot snapshot() const;

 private:
  struct Pending {
    std::vector<int32_t> prompt_ids;
    std::vector<infer::SamplingParams> choices;
    std::promise<std::vector<std::shared_ptr<RequestStream>>> accepted;
  };
  void add(Pending& p);  // loop thread

  void run();
  void publish();
  void end_all(const std::string& why);

  infer::Engine& engine_;
  mutable std::mutex mutex_;  // guards pending_, aborts_, stop_, failure_, snapshot_
  std::condition_variable wake_;
  std::deque<Pending> pending_;
  std::vector<int64_t> aborts_;
  bool stop_ = false;
  std::string failure_;
  LoopSnapshot snapshot_;
  std::atomic<bool> running_{true};
  std::map<int64_t, std::shared_ptr<RequestStream>> streams_;  // loop thread only
  double step_seconds_ = 0.0;                                  // loop thread only
  std::thread thread_;
};

}  // namespace microllm::serve
