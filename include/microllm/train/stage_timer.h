// Where a training step's time goes, per rank: forward, backward, communication wait and
// optimizer. mark(stage) closes the interval since the previous mark and adds it to `stage`;
// stages may repeat (forward and backward alternate over micro-batches).
//
// On the CPU the marks read the host clock. On CUDA they record events on the current
// stream, so the intervals are device time in stream order; read them with finish() after
// the step's one host synchronization (the loss read), which costs no extra wait.
#pragma once

#include <array>
#include <chrono>
#include <memory>
#include <utility>
#include <vector>

#include "microllm/core/device.h"

namespace microllm::train {

enum class Stage { Forward, Backward, CommWait, Optimizer };
inline constexpr int kStageCount = 4;
const char* stage_name(Stage stage);

struct StageSeconds {
  std::array<double, kStageCount> seconds{};  // indexed by Stage
  double operator[](Stage s) const { return seconds[static_cast<size_t>(s)]; }
};

class StageTimer {
 public:
  explicit StageTimer(Device device);
  ~StageTimer();
  StageTimer(const StageTimer&) = delete;
  StageTimer& operator=(const StageTimer&) = delete;

  void start();            // the step begins
  void mark(Stage stage);  // the interval since the last mark (or start) was `stage`
  StageSeconds finish();   // sums per stage; the device work up to the last mark is complete

 private:
  struct DeviceEvents;  // CUDA events, reused from step to step
  Device device_;
  std::vector<Stage> stages_;                                // stage of each mark
  std::vector<std::chrono::steady_clock::time_point> host_;  // start + one per mark (CPU)
  std::unique_ptr<DeviceEvents> events_;
};

}  // namespace microllm::train
