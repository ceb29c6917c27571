// CUDA runtime pieces every operator uses: device queries, the current stream per device,
// events, and the counters that prove hot paths neither copy nor synchronize unexpectedly.
//
// Every launch and copy goes to `current_stream(device)`. Each device has one main stream
// created on first use (non-blocking, so the legacy default stream never serializes it);
// StreamGuard switches the current stream for a scope.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

#include "microllm/core/device.h"

namespace microllm::cuda {

// Number of visible CUDA devices (0 when there is no driver or no GPU).
int device_count();
bool is_available();
// Why is_available() is false, for messages and skipped tests ("" when available).
std::string unavailable_reason();
// Throws a clear Error unless `device` is a CUDA device that exists; makes it current.
void set_device(Device device);

class Stream {
 public:
  Stream() = default;
  Stream(Device device, cudaStream_t handle) : device_(device), handle_(handle) {}
  // A new non-blocking stream on `device`, owned by the process (never destroyed).
  static Stream create(Device device);
  cudaStream_t handle() const { return handle_; }
  Device device() const { return device_; }
  bool operator==(const Stream&) const = default;

 private:
  Device device_ = Device::cuda(0);
  cudaStream_t handle_ = nullptr;
};

Stream current_stream(Device device);
cudaStream_t current_stream_handle(Device device);

class StreamGuard {
 public:
  explicit StreamGuard(Stream stream);
  ~StreamGuard();
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  Stream previous_;
};

class Event {
 public:
  explicit Event(bool timing = false);
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  void record(const Stream& stream);
  void wait(const Stream& stream) const;  // stream waits on the event (no host block)
  void synchronize() const;               // host waits; counted as a synchronization
  bool query() const;                     // true when complete
  float elapsed_ms(const Event& end) const;
  cudaEvent_t handle() const { return event_; }

 private:
  cudaEvent_t event_ = nullptr;
};

// Host waits for all work on the stream; counted. An Error while the stream is capturing a
// CUDA graph (a synchronization there would invalidate the capture).
void synchronize(const Stream& stream);

// True while `stream` is capturing a CUDA graph (also when that capture was invalidated).
bool is_capturing(const Stream& stream);

// Programmatic dependent launch (compute capability 9.0): the kernels launched through
// launch_dependent (src/cuda/dependent_launch.cuh) may start while the kernel before them
// in the stream is finishing, and wait on the device for its results. On by default; off
// with MICROLLM_PROGRAMMATIC_LAUNCH=0 (read at first use) or set_programmatic_launch(false),
// which give the same bits (the kernels run the same code in the same order, only sooner).
// A CUDA graph keeps the setting it was captured with.
bool programmatic_launch();
void set_programmatic_launch(bool enabled);

// Copies and host synchronizations made through microllm since start (or the last reset):
// the backend's copies (Tensor::copy_from, to), pinned-buffer copies, checkpoint uploads,
// Event::synchronize and synchronize(). Copies inside a captured CUDA graph count once, when
// captured, not at each replay.
struct TransferStats {
  int64_t h2d_calls = 0, h2d_bytes = 0;
  int64_t d2h_calls = 0, d2h_bytes = 0;
  int64_t d2d_calls = 0, d2d_bytes = 0;
  int64_t host_synchronizations = 0;
  // The debug launch checks' synchronizations (debug builds, MICROLLM_CUDA_SYNC_CHECK=1),
  // kept apart so a step's budget of host synchronizations holds in debug builds too.
  int64_t launch_check_synchronizations = 0;
};
TransferStats transfer_stats();
void reset_transfer_stats();
// Used by the backend and by Event/synchronize to count.
void count_transfer(cudaMemcpyKind kind, size_t bytes);
void count_synchronization();
void count_launch_check_synchronization();

}  // namespace microllm::cuda
