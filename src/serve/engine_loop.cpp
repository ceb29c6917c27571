// EngineLoop and RequestStream (see engine_loop.h).
#include "microllm/serve/engine_loop.h"

#include "microllm/core/error.h"

namespace microllm::serve {

std::optional<StreamEvent> RequestStream::next(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  if (!ready_.wait_for(lock, timeout, [&] { return !events_.empty(); })) return std::nullopt;
  StreamEvent event = std::move(events_.front());
  events_.pop_front();
  return event;
}

bool RequestStream::ready() {
  std::lock_guard lock(mutex_);
  return !events_.empty();
}

void RequestStream::push(StreamEvent event) {
  {
    std::lock_guard lock(mutex_);
    events_.push_back(std::move(event));
  }
  ready_.notify_one();
}

EngineLoop::EngineLoop(infer::Engine& engine) : engine_(engine) {
  publish();
  thread_ = std::thread([this] { run(); });
}

EngineLoop::~EngineLoop() {
  stop();
  if (thread_.joinable()) thread_.join();
}

std::shared_ptr<RequestStream> EngineLoop::submit(std::vector<int32_t> prompt_ids,
                                                  infer::SamplingParams params) {
  return submit_choices(std::move(prompt_ids), {std::move(params)}).front();
}

std::vector<std::shared_ptr<RequestStream>> EngineLoop::submit_choices(
    std::vector<int32_t> prompt_ids, std::vector<infer::SamplingParams> choices) {
  MICROLLM_CHECK(!choices.empty(), "serve", "submit_choices: no choices given");
  std::future<std::vector<std::shared_ptr<RequestStream>>> accepted;
  {
    std::lock_guard lock(mutex_);
    MICROLLM_CHECK(!stop_, "serve", "the engine loop has stopped",
                   failure_.empty() ? std::string() : ": " + failure_);
    pending_.push_back({std::move(prompt_ids), std::move(choices), {}});
    accepted = pending_.back().accepted.get_future();
  }
  wake_.notify_one();
  return accepted.get();  // rethrows the engine's refusal
}

void EngineLoop::add(Pending& p) {
  std::vector<int64_t> ids;
  try {
    for (size_t i = 0; i < p.choices.size(); ++i)
      ids.push_back(
          engine_.add_request(p.prompt_ids, std::move(p.choices[i]), i == 0 ? -1 : ids.front()));
  } catch (...) {
    for (const int64_t id : ids) engine_.abort(id);
    p.accepted.set_exception(std::current_exception());
    return;
  }
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (const int64_t id : ids) {
    streams.push_back(std::make_shared<RequestStream>(id));
    streams_[id] = streams.back();
  }
  p.accepted.set_value(std::move(streams));
}

void EngineLoop::abort(int64_t request_id) {
  {
    std::lock_guard lock(mutex_);
    aborts_.push_back(request_id);
  }
  wake_.notify_one();
}

void EngineLoop::stop() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  running_ = false;
  wake_.notify_one();
}

std::string EngineLoop::failure() const {
  std::lock_guard lock(mutex_);
  return failure_;
}

LoopSnapshot EngineLoop::snapshot() const {
  std::lock_guard lock(mutex_);
  return snapshot_;
}

// Loop thread: copies the engine's counters where other threads can read them.
void EngineLoop::publish() {
  LoopSnapshot s;
  s.requests = static_cast<int64_t>(streams_.size());
  s.kv_blocks_total = engine_.num_kv_blocks();
  s.kv_blocks_used = s.kv_blocks_total - engine_.num_free_kv_blocks();
  s.kv_blocks_cached = engine_.num_cached_kv_blocks();
  s.waiting = engine_.num_waiting_requests();
  s.running = engine_.num_running_requests();
  const infer::EngineStats& e = engine_.stats();
  s.steps = e.steps;
  s.prompt_tokens = e.prompt_tokens;
  s.generated_tokens = e.generated_tokens;
  s.preemptions = e.preemptions;
  s.prefix_cache_queries = e.prefix_cache_queries;
  s.prefix_cache_hits = e.prefix_cache_hits;
  s.step_seconds = step_seconds_;
  std::lock_guard lock(mutex_);
  snapshot_ = s;
}

// Loop thread: every unfinished stream gets `why`, every request not yet taken is refused.
void EngineLoop::end_all(const std::string& why) {
  for (auto& [id, stream] : streams_) {
    engine_.abort(id);
    stream->push(StreamEvent::of_error(why));
  }
  streams_.clear();
  std::deque<Pending> pending;
  {
    std::lock_guard lock(mutex_);
    pending.swap(pending_);
  }
  for (Pending& p : pending) p.accepted.set_exception(std::make_exception_ptr(Error("serve", why)));
}

void EngineLoop::run() {
  bool busy = false;  // the engine has unfinished requests
  for (;;) {
    std::deque<Pending> adds;
    std::vector<int64_t> aborts;
    {
      std::unique_lock lock(mutex_);
      if (!busy) wake_.wait(lock, [&] { return stop_ || !pending_.empty() || !aborts_.empty(); });
      if (stop_) break;
      adds.swap(pending_);
      aborts.swap(aborts_);
    }
    for (Pending& p : adds) add(p);
    for (const int64_t id : aborts) {
      engine_.abort(id);
      streams_.erase(id);
    }
    busy = engine_.has_unfinished();
    if (busy) {
      try {
        const auto began = std::chrono::steady_clock::now();
        std::vector<infer::TokenOutput> outputs = engine_.step();
        step_seconds_ += seconds_since(began);
        for (infer::TokenOutput& t : outputs) {
          const auto it = streams_.find(t.request_id);
          if (it == streams_.end()) continue;
          const bool finished = t.finished;
          it->second->push(StreamEvent::of_token(std::move(t)));
          if (finished) streams_.erase(it);
        }
      } catch (const std::exception& e) {
        const std::string why = std::string("the engine failed: ") + e.what();
        {
          std::lock_guard lock(mutex_);
          stop_ = true;
          failure_ = why;
        }
        running_ = false;
        end_all(why);
        publish();
        return;
      }
      busy = engine_.has_unfinished();
    }
    publish();
  }
  end_all("the engine stopped");
  publish();
}

}  // namespace microllm::serve
