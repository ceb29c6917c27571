// The caching device allocator (see allocator.h for the policy).
//
// State: every block obtained from cudaMalloc is either live (in `live_`) or cached in the
// free pool of its (device, stream), ordered by size for best fit. A freed block that other
// streams used waits in `pending_` with one event per such stream until all complete.
#include "microllm/cuda/allocator.h"

#include <array>
#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "microllm/cuda/check.h"
#include "microllm/cuda/runtime.h"

namespace microllm::cuda {
namespace {

constexpr int kMaxDevices = 16;
constexpr size_t kKiB = 1024, kMiB = 1024 * kKiB;

struct Block {
  void* ptr;
  size_t size;
  int device;
  cudaStream_t stream;                // the stream it was allocated on
  std::vector<cudaStream_t> used_by;  // other streams (record_stream)
  std::vector<cudaEvent_t> pending_events;
};

using PoolKey = std::pair<int, cudaStream_t>;

class CachingAllocator {
 public:
  void* allocate(size_t nbytes, Device device) {
    set_device(device);
    const size_t size = round_size(nbytes);
    const cudaStream_t stream = current_stream_handle(device);
    std::lock_guard<std::mutex> lock(mutex_);
    AllocatorStats& st = stats_[device.index];
    process_pending();
    Block* block = take_cached(device.index, stream, size);
    if (block) {
      ++st.cache_hits;
    } else {
      void* ptr = nullptr;
      cudaError_t status = cudaMalloc(&ptr, size);
      if (status == cudaErrorMemoryAllocation) {
        cudaGetLastError();
        release_cached(device.index);  // give the cache back and try once more
        status = cudaMalloc(&ptr, size);
      }
      // A failed cudaMalloc stays the "last error" until read; clear it so the next launch
      // check does not report it.
      if (status != cudaSuccess) cudaGetLastError();
      MICROLLM_CHECK(status == cudaSuccess, "cuda allocator", "out of memory on ", device,
                     " allocating ", nbytes, " bytes (", size,
                     " rounded): ", cudaGetErrorString(status), "; allocated ", st.allocated_bytes,
                     " bytes, reserved ", st.reserved_bytes, " bytes");
      ++st.backend_mallocs;
      st.reserved_bytes += static_cast<int64_t>(size);
      st.peak_reserved_bytes = std::max(st.peak_reserved_bytes, st.reserved_bytes);
      block = new Block{ptr, size, device.index, stream, {}, {}};
    }
    ++st.allocations;
    st.allocated_bytes += static_cast<int64_t>(block->size);
    st.peak_allocated_bytes = std::max(st.peak_allocated_bytes, st.allocated_bytes);
    live_[block->ptr] = block;
    return block->ptr;
  }

  void deallocate(void* ptr) {
    if (!ptr) return;
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = live_.find(ptr);
    MICROLLM_CHECK(it != live_.end(), "cuda allocator", "freeing a pointer it did not allocate");
    Block* block = it->second;
    live_.erase(it);
    stats_[block->device].allocated_bytes -= static_cast<int64_t>(block->size);
    if (block->used_by.empty()) {
      cache(block);
      return;
    }
    // Reuse only after the work queued on the other streams is done.
    CUDA_CHECK(cudaSetDevice(block->device));
    for (cudaStream_t s : block->used_by) {
      cudaEvent_t event;
      CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
      CUDA_CHECK(cudaEventRecord(event, s));
      block->pending_events.push_back(event);
    }
    block->used_by.clear();
    pending_.push_back(block);
  }

  void record_stream(void* ptr, cudaStream_t stream) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = live_.find(ptr);
    MICROLLM_CHECK(it != live_.end(), "cuda allocator", "record_stream on an unknown pointer");
    Block* block = it->second;
    if (stream != block->stream) block->used_by.push_back(stream);
  }

  void empty_cache(Device device) {
    std::lock_guard<std::mutex> lock(mutex_);
    process_pending();
    release_cached(device.index);
  }

  AllocatorStats stats(Device device) {
    std::lock_guard<std::mutex> lock(mutex_);
    return stats_[device.index];
  }

  void reset_peak(Device device) {
    std::lock_guard<std::mutex> lock(mutex_);
    AllocatorStats& st = stats_[device.index];
    st.peak_allocated_bytes = st.allocated_bytes;
    st.peak_reserved_bytes = st.reserved_bytes;
  }

 private:
  // Smallest cached block of this pool that is ≥ size and at most twice it.
  Block* take_cached(int device, cudaStream_t stream, size_t size) {
    auto pool = pools_.find({device, stream});
    if (pool == pools_.end()) return nullptr;
    auto it = pool->second.lower_bound(size);
    if (it == pool->second.end() || it->first > 2 * size) return nullptr;
    Block* block = it->second;
    pool->second.erase(it);
    return block;
  }

  void cache(Block* block) { pools_[{block->device, block->stream}].emplace(block->size, block); }

  // Moves pending blocks whose events have all completed into their pools.
  void process_pending() {
    for (size_t i = 0; i < pending_.size();) {
      Block* block = pending_[i];
      bool done = true;
      for (cudaEvent_t e : block->pending_events) {
        const cudaError_t status = cudaEventQuery(e);
        if (status == cudaErrorNotReady) {
          done = false;
          break;
        }
        CUDA_CHECK(status);
      }
      if (!done) {
        ++i;
        continue;
      }
      for (cudaEvent_t e : block->pending_events) cudaEventDestroy(e);
      block->pending_events.clear();
      cache(block);
      pending_[i] = pending_.back();
      pending_.pop_back();
    }
  }

  void release_cached(int device) {
    for (auto& [key, pool] : pools_) {
      if (key.first != device) continue;
      for (auto& [size, block] : pool) {
        CUDA_CHECK(cudaFree(block->ptr));
        AllocatorStats& st = stats_[device];
        ++st.backend_frees;
        st.reserved_bytes -= static_cast<int64_t>(block->size);
        delete block;
      }
      pool.clear();
    }
  }

  std::mutex mutex_;
  std::unordered_map<void*, Block*> live_;
  std::map<PoolKey, std::multimap<size_t, Block*>> pools_;
  std::vector<Block*> pending_;
  std::array<AllocatorStats, kMaxDevices> stats_{};
};

// Never destroyed: blocks may be freed by static tensors after main returns.
CachingAllocator& instance() {
  static CachingAllocator* allocator = new CachingAllocator();
  return *allocator;
}

}  // namespace

size_t round_size(size_t nbytes) {
  auto round_up = [](size_t n, size_t unit) { return (n + unit - 1) / unit * unit; };
  if (nbytes == 0) return 512;
  if (nbytes < kMiB) return round_up(nbytes, 512);
  if (nbytes < 64 * kMiB) return round_up(nbytes, 64 * kKiB);
  return round_up(nbytes, 2 * kMiB);
}

void* allocate(size_t nbytes, Device device) { return instance().allocate(nbytes, device); }
void deallocate(void* ptr) { instance().deallocate(ptr); }
void record_stream(void* ptr, cudaStream_t stream) { instance().record_stream(ptr, stream); }
void empty_cache(Device device) { instance().empty_cache(device); }
AllocatorStats allocator_stats(Device device) { return instance().stats(device); }
void reset_peak_stats(Device device) { instance().reset_peak(device); }

}  // namespace microllm::cuda
