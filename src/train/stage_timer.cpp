// Per-stage step timing on the host clock (CPU) or with CUDA events (see stage_timer.h).
#include "microllm/train/stage_timer.h"

#include "microllm/core/error.h"
#if MICROLLM_WITH_CUDA
#include "microllm/cuda/runtime.h"
#endif

namespace microllm::train {

const char* stage_name(Stage stage) {
  switch (stage) {
    case Stage::Forward:
      return "forward";
    case Stage::Backward:
      return "backward";
    case Stage::CommWait:
      return "comm wait";
    case Stage::Optimizer:
      return "optimizer";
  }
  return "?";
}

#if MICROLLM_WITH_CUDA
struct StageTimer::DeviceEvents {
  std::vector<std::unique_ptr<cuda::Event>> events;  // start + one per mark, grown on demand
  size_t used = 0;
  void record(Device device) {
    if (used == events.size()) {
      cuda::set_device(device);  // events belong to the device current at creation
      events.push_back(std::make_unique<cuda::Event>(/*timing=*/true));
    }
    events[used++]->record(cuda::current_stream(device));
  }
};
#else
struct StageTimer::DeviceEvents {};
#endif

StageTimer::StageTimer(Device device) : device_(device) {
#if MICROLLM_WITH_CUDA
  if (device_.is_cuda()) events_ = std::make_unique<DeviceEvents>();
#endif
}

StageTimer::~StageTimer() = default;

void StageTimer::start() {
  stages_.clear();
  host_.clear();
#if MICROLLM_WITH_CUDA
  if (events_) {
    events_->used = 0;
    events_->record(device_);
    return;
  }
#endif
  host_.push_back(std::chrono::steady_clock::now());
}

void StageTimer::mark(Stage stage) {
  stages_.push_back(stage);
#if MICROLLM_WITH_CUDA
  if (events_) {
    events_->record(device_);
    return;
  }
#endif
  host_.push_back(std::chrono::steady_clock::now());
}

StageSeconds StageTimer::finish() {
  StageSeconds out;
#if MICROLLM_WITH_CUDA
  if (events_) {
    MICROLLM_CHECK(events_->used == stages_.size() + 1, "stage timer", "finish() without start()");
    // Complete already when the step's loss has been read (same stream): query, no wait.
    const cuda::Event& last = *events_->events[stages_.size()];
    if (!last.query()) last.synchronize();
    for (size_t i = 0; i < stages_.size(); ++i)
      out.seconds[static_cast<size_t>(stages_[i])] +=
          events_->events[i]->elapsed_ms(*events_->events[i + 1]) / 1e3;
    return out;
  }
#endif
  MICROLLM_CHECK(host_.size() == stages_.size() + 1, "stage timer", "finish() without start()");
  for (size_t i = 0; i < stages_.size(); ++i)
    out.seconds[static_cast<size_t>(stages_[i])] +=
        std::chrono::duration<double>(host_[i + 1] - host_[i]).count();
  return out;
}

}  // namespace microllm::train
