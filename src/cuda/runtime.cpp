// Devices, current streams, events and the transfer / synchronization counters.
#include "microllm/cuda/runtime.h"

#include <array>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "microllm/cuda/check.h"

namespace microllm::cuda {
namespace {

constexpr int kMaxDevices = 16;

struct DeviceState {
  std::once_flag once;
  Stream main;
};
std::array<DeviceState, kMaxDevices> g_devices;
thread_local std::array<cudaStream_t, kMaxDevices> t_current{};  // null: the device's main stream

struct Counters {
  std::atomic<int64_t> h2d_calls{0}, h2d_bytes{0}, d2h_calls{0}, d2h_bytes{0};
  std::atomic<int64_t> d2d_calls{0}, d2d_bytes{0}, syncs{0}, launch_check_syncs{0};
};
Counters g_counters;

}  // namespace

int device_count() {
  static const int count = [] {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
      cudaGetLastError();  // clear the sticky "no device" status
      return 0;
    }
    return n;
  }();
  return count;
}

bool is_available() { return device_count() > 0; }

std::string unavailable_reason() {
  if (is_available()) return "";
  int n = 0;
  const cudaError_t status = cudaGetDeviceCount(&n);
  cudaGetLastError();
  return std::string("no CUDA device: cudaGetDeviceCount returned ") + cudaGetErrorName(status) +
         " (" + cudaGetErrorString(status) + ")";
}

void set_device(Device device) {
  MICROLLM_CHECK(device.is_cuda(), "cuda", "expected a CUDA device, found ", device);
  MICROLLM_CHECK(is_available(), "cuda", "device ", device,
                 " is not available: ", unavailable_reason());
  MICROLLM_CHECK(device.index >= 0 && device.index < device_count() && device.index < kMaxDevices,
                 "cuda", "device ", device, " does not exist (", device_count(), " visible)");
  CUDA_CHECK(cudaSetDevice(device.index));
}

Stream Stream::create(Device device) {
  set_device(device);
  cudaStream_t handle = nullptr;
  CUDA_CHECK(cudaStreamCreateWithFlags(&handle, cudaStreamNonBlocking));
  return Stream(device, handle);
}

Stream current_stream(Device device) {
  set_device(device);
  if (cudaStream_t s = t_current[device.index]) return Stream(device, s);
  DeviceState& state = g_devices[device.index];
  std::call_once(state.once, [&] { state.main = Stream::create(device); });
  return state.main;
}

cudaStream_t current_stream_handle(Device device) { return current_stream(device).handle(); }

StreamGuard::StreamGuard(Stream stream) : previous_(current_stream(stream.device())) {
  t_current[stream.device().index] = stream.handle();
}
StreamGuard::~StreamGuard() { t_current[previous_.device().index] = previous_.handle(); }

Event::Event(bool timing) {
  CUDA_CHECK(cudaEventCreateWithFlags(&event_, timing ? cudaEventDefault : cudaEventDisableTiming));
}
Event::~Event() {
  if (event_) cudaEventDestroy(event_);
}
void Event::record(const Stream& stream) { CUDA_CHECK(cudaEventRecord(event_, stream.handle())); }
void Event::wait(const Stream& stream) const {
  CUDA_CHECK(cudaStreamWaitEvent(stream.handle(), event_, 0));
}
void Event::synchronize() const {
  count_synchronization();
  CUDA_CHECK(cudaEventSynchronize(event_));
}
bool Event::query() const {
  const cudaError_t status = cudaEventQuery(event_);
  if (status == cudaErrorNotReady) return false;
  CUDA_CHECK(status);
  return true;
}
float Event::elapsed_ms(const Event& end) const {
  float ms = 0.0f;
  CUDA_CHECK(cudaEventElapsedTime(&ms, event_, end.event_));
  return ms;
}

void synchronize(const Stream& stream) {
  MICROLLM_CHECK(!is_capturing(stream), "cuda", "host synchronization of a stream of ",
                 stream.device(),
                 " while it captures a CUDA graph; a captured step must not wait on the host");
  count_synchronization();
  CUDA_CHECK(cudaStreamSynchronize(stream.handle()));
}

bool is_capturing(const Stream& stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  CUDA_CHECK(cudaStreamIsCapturing(stream.handle(), &status));
  return status != cudaStreamCaptureStatusNone;
}

TransferStats transfer_stats() {
  TransferStats s;
  s.h2d_calls = g_counters.h2d_calls;
  s.h2d_bytes = g_counters.h2d_bytes;
  s.d2h_calls = g_counters.d2h_calls;
  s.d2h_bytes = g_counters.d2h_bytes;
  s.d2d_calls = g_counters.d2d_calls;
  s.d2d_bytes = g_counters.d2d_bytes;
  s.host_synchronizations = g_counters.syncs;
  s.launch_check_synchronizations = g_counters.launch_check_syncs;
  return s;
}

void reset_transfer_stats() {
  for (auto* c : {&g_counters.h2d_calls, &g_counters.h2d_bytes, &g_counters.d2h_calls,
                  &g_counters.d2h_bytes, &g_counters.d2d_calls, &g_counters.d2d_bytes,
                  &g_counters.syncs, &g_counters.launch_check_syncs})
    c->store(0);
}

void count_transfer(cudaMemcpyKind kind, size_t bytes) {
  const auto n = static_cast<int64_t>(bytes);
  switch (kind) {
    case cudaMemcpyHostToDevice:
      ++g_counters.h2d_calls;
      g_counters.h2d_bytes += n;
      break;
    case cudaMemcpyDeviceToHost:
      ++g_counters.d2h_calls;
      g_counters.d2h_bytes += n;
      break;
    default:
      ++g_counters.d2d_calls;
      g_counters.d2d_bytes += n;
      break;
  }
}

namespace {
// -1: not decided yet (MICROLLM_PROGRAMMATIC_LAUNCH decides at first use).
std::atomic<int> g_programmatic_launch{-1};
}  // namespace

bool programmatic_launch() {
  int value = g_programmatic_launch.load(std::memory_order_relaxed);
  if (value < 0) {
    const char* env = std::getenv("MICROLLM_PROGRAMMATIC_LAUNCH");
    int expected = -1;
    g_programmatic_launch.compare_exchange_strong(expected,
                                                  env && std::strcmp(env, "0") == 0 ? 0 : 1);
    value = g_programmatic_launch.load();
  }
  return value == 1;
}

void set_programmatic_launch(bool enabled) { g_programmatic_launch = enabled ? 1 : 0; }

void count_synchronization() { ++g_counters.syncs; }
void count_launch_check_synchronization() { ++g_counters.launch_check_syncs; }

}  // namespace microllm::cuda
