// The caching device allocator and its private pools (see allocator.h for the policy).
//
// State: every block obtained from cudaMalloc is either live (in `live_`), cached in the
// free list of its (device, stream) or of its private pool, waiting in `pending_` (freed
// while other streams used it: one event per such stream, until all complete), or held
// back in `held_` (freed during a capture that no pool owns). A block's `pool` is 0 for the
// general cache, else the id of the private pool that owns it for the rest of its life.
// `routes_` maps (device, stream) to the pool a PoolGuard routes that stream's requests to.
#include <algorithm>
#include <array>
#include <iterator>
#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "microllm/cuda/allocator.h"
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
  uint64_t pool;                      // 0: general cache; else the owning private pool
  std::vector<cudaStream_t> used_by;  // other streams (record_stream)
  std::vector<cudaEvent_t> pending_events;
};

using StreamKey = std::pair<int, cudaStream_t>;
using FreeList = std::multimap<size_t, Block*>;  // by size, for best fit

struct Pool {
  int device;
  bool alive = true;  // false once its PrivatePool is destroyed
  FreeList free;
  int64_t live_blocks = 0;
  PoolStats stats;
};

// Sets the calling thread's capture mode to relaxed for a scope, so cudaMalloc / cudaFree
// may run while this thread captures (the allocation is not part of the graph: the pool
// keeps the memory for the graph, and only blocks no graph uses are freed).
class RelaxedCaptureMode {
 public:
  RelaxedCaptureMode() { cudaThreadExchangeStreamCaptureMode(&mode_); }
  ~RelaxedCaptureMode() { cudaThreadExchangeStreamCaptureMode(&mode_); }
  RelaxedCaptureMode(const RelaxedCaptureMode&) = delete;
  RelaxedCaptureMode& operator=(const RelaxedCaptureMode&) = delete;

 private:
  cudaStreamCaptureMode mode_ = cudaStreamCaptureModeRelaxed;
};

// Capture status without throwing (frees run in destructors, also during process exit).
bool capturing_quietly(cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &status) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return status != cudaStreamCaptureStatusNone;
}

// Smallest block of `list` that is ≥ size and at most twice it, removed from the list.
Block* take_best_fit(FreeList& list, size_t size) {
  auto it = list.lower_bound(size);
  if (it == list.end() || it->first > 2 * size) return nullptr;
  Block* block = it->second;
  list.erase(it);
  return block;
}

class CachingAllocator {
 public:
  void* allocate(size_t nbytes, Device device) {
    set_device(device);
    const size_t size = round_size(nbytes);
    const Stream stream = current_stream(device);
    const bool capturing = is_capturing(stream);
    std::lock_guard<std::mutex> lock(mutex_);
    AllocatorStats& st = stats_[device.index];
    auto route = routes_.find({device.index, stream.handle()});
    if (route != routes_.end())
      return allocate_in_pool(route->second, nbytes, size, device, stream, capturing);
    MICROLLM_CHECK(!capturing, "cuda allocator", "allocation of ", nbytes, " bytes on ", device,
                   " during CUDA-graph capture; allocate before capture or use a private pool "
                   "(cuda::PoolGuard, as CudaGraph::capture does)");
    process_pending();
    Block* block = take_cached(device.index, stream.handle(), size);
    if (block) {
      ++st.cache_hits;
    } else {
      block = new Block{malloc_block(nbytes, size, device, false),
                        size,
                        device.index,
                        stream.handle(),
                        0,
                        {},
                        {}};
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
    AllocatorStats& st = stats_[block->device];
    st.allocated_bytes -= static_cast<int64_t>(block->size);
    if (block->pool != 0) {
      free_pool_block(block);
      return;
    }
    if (const uint64_t keeper = keeper_for(block); keeper != 0) {
      keep_for_capture(block, keeper);
      return;
    }
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
    MICROLLM_CHECK(block->pool == 0, "cuda allocator",
                   "record_stream on a block of a private pool (CUDA-graph memory); keep the "
                   "captured work on the capture stream");
    if (stream != block->stream) block->used_by.push_back(stream);
  }

  void empty_cache(Device device) {
    MICROLLM_CHECK(!is_capturing(current_stream(device)), "cuda allocator", "empty_cache on ",
                   device, " while its current stream captures a CUDA graph");
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

  // ---- private pools -------------------------------------------------------------------

  uint64_t create_pool(Device device) {
    std::lock_guard<std::mutex> lock(mutex_);
    const uint64_t id = next_pool_id_++;
    pools_[id].device = device.index;
    ++stats_[device.index].private_pools;
    return id;
  }

  // The pool's free blocks go back to the driver; live ones follow when freed.
  void release_pool(uint64_t id) noexcept {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = pools_.find(id);
    if (it == pools_.end()) return;
    Pool& pool = it->second;
    pool.alive = false;
    --stats_[pool.device].private_pools;
    for (auto& [size, block] : pool.free) free_to_driver(block, pool);
    pool.free.clear();
    for (auto route = routes_.begin(); route != routes_.end();)
      route = route->second == id ? routes_.erase(route) : std::next(route);
    if (pool.live_blocks == 0) pools_.erase(it);
  }

  PoolStats pool_stats(uint64_t id) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = pools_.find(id);
    return it == pools_.end() ? PoolStats{} : it->second.stats;
  }

  uint64_t route(int device, cudaStream_t stream, uint64_t pool) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = routes_.find({device, stream});
    const uint64_t previous = it == routes_.end() ? 0 : it->second;
    if (pool == 0) {
      if (it != routes_.end()) routes_.erase(it);
    } else {
      routes_[{device, stream}] = pool;
    }
    return previous;
  }

 private:
  // cudaMalloc of `size` bytes; counted. While `capturing` (a pool's request), in relaxed
  // capture mode, and without the release-and-retry on failure (no cudaFree in a capture).
  void* malloc_block(size_t nbytes, size_t size, Device device, bool capturing) {
    AllocatorStats& st = stats_[device.index];
    void* ptr = nullptr;
    cudaError_t status;
    if (capturing) {
      RelaxedCaptureMode relaxed;
      status = cudaMalloc(&ptr, size);
    } else {
      status = cudaMalloc(&ptr, size);
    }
    if (status == cudaErrorMemoryAllocation && !capturing) {
      cudaGetLastError();
      release_cached(device.index);
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
    return ptr;
  }

  void* allocate_in_pool(uint64_t id, size_t nbytes, size_t size, Device device,
                         const Stream& stream, bool capturing) {
    Pool& pool = pools_.at(id);
    AllocatorStats& st = stats_[device.index];
    Block* block = take_best_fit(pool.free, size);
    if (block) {
      ++st.cache_hits;
      ++st.pool_cache_hits;
      ++pool.stats.cache_hits;
    } else {
      void* ptr = malloc_block(nbytes, size, device, capturing);
      block = new Block{ptr, size, device.index, stream.handle(), id, {}, {}};
      ++pool.stats.backend_mallocs;
      pool.stats.reserved_bytes += static_cast<int64_t>(size);
      st.pool_reserved_bytes += static_cast<int64_t>(size);
    }
    const auto bytes = static_cast<int64_t>(block->size);
    ++st.allocations;
    ++st.pool_allocations;
    st.allocated_bytes += bytes;
    st.peak_allocated_bytes = std::max(st.peak_allocated_bytes, st.allocated_bytes);
    ++pool.stats.allocations;
    pool.stats.allocated_bytes += bytes;
    ++pool.live_blocks;
    live_[block->ptr] = block;
    return block->ptr;
  }

  // A pool's block comes back: to the pool while it lives, else to the driver.
  void free_pool_block(Block* block) {
    auto it = pools_.find(block->pool);
    Pool& pool = it->second;
    pool.stats.allocated_bytes -= static_cast<int64_t>(block->size);
    --pool.live_blocks;
    if (pool.alive) {
      pool.free.emplace(block->size, block);
      return;
    }
    free_to_driver(block, pool);
    if (pool.live_blocks == 0) pools_.erase(it);
  }

  // The pool that must keep a general-cache block freed now, because a capture in progress
  // may read it at replay: the pool routed to the block's own stream if that captures, else
  // the one routed to the device's capturing stream (a block used across streams). kHeld:
  // a capture with no pool, or several, may use it. 0: no capture can have seen it.
  static constexpr uint64_t kHeld = ~uint64_t(0);
  uint64_t keeper_for(const Block* block) const {
    if (capturing_quietly(block->stream)) {
      auto own = routes_.find({block->device, block->stream});
      return own == routes_.end() ? kHeld : own->second;
    }
    uint64_t keeper = 0;
    for (const auto& [key, id] : routes_) {
      if (key.first != block->device || !capturing_quietly(key.second)) continue;
      if (keeper != 0) return kHeld;
      keeper = id;
    }
    return keeper;
  }

  // A general-cache block a capture may still use: adopted by `keeper`'s pool (freed with
  // it, reused only inside it) or held back for good.
  void keep_for_capture(Block* block, uint64_t keeper) {
    AllocatorStats& st = stats_[block->device];
    if (keeper == kHeld) {
      st.capture_held_bytes += static_cast<int64_t>(block->size);
      held_.push_back(block);
      return;
    }
    Pool& pool = pools_.at(keeper);
    block->pool = keeper;
    block->used_by.clear();  // reused only by the pool's own captures, later on the device
    pool.free.emplace(block->size, block);
    ++pool.stats.adopted_blocks;
    pool.stats.reserved_bytes += static_cast<int64_t>(block->size);
    st.pool_reserved_bytes += static_cast<int64_t>(block->size);
  }

  void free_to_driver(Block* block, Pool& pool) noexcept {
    {
      RelaxedCaptureMode relaxed;
      if (cudaFree(block->ptr) != cudaSuccess) cudaGetLastError();
    }
    AllocatorStats& st = stats_[block->device];
    const auto bytes = static_cast<int64_t>(block->size);
    ++st.backend_frees;
    st.reserved_bytes -= bytes;
    st.pool_reserved_bytes -= bytes;
    pool.stats.reserved_bytes -= bytes;
    delete block;
  }

  Block* take_cached(int device, cudaStream_t stream, size_t size) {
    auto list = free_.find({device, stream});
    return list == free_.end() ? nullptr : take_best_fit(list->second, size);
  }

  void cache(Block* block) { free_[{block->device, block->stream}].emplace(block->size, block); }

  // Moves pending blocks whose events have all completed into their free lists.
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
    for (auto& [key, list] : free_) {
      if (key.first != device) continue;
      for (auto& [size, block] : list) {
        CUDA_CHECK(cudaFree(block->ptr));
        AllocatorStats& st = stats_[device];
        ++st.backend_frees;
        st.reserved_bytes -= static_cast<int64_t>(block->size);
        delete block;
      }
      list.clear();
    }
  }

  std::mutex mutex_;
  std::unordered_map<void*, Block*> live_;
  std::map<StreamKey, FreeList> free_;  // the general cache
  std::vector<Block*> pending_;
  std::vector<Block*> held_;
  std::unordered_map<uint64_t, Pool> pools_;
  std::map<StreamKey, uint64_t> routes_;
  uint64_t next_pool_id_ = 1;
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

PrivatePool::PrivatePool(Device device) : device_(device) {
  MICROLLM_CHECK(device.is_cuda() && device.index >= 0 && device.index < kMaxDevices,
                 "cuda allocator", "a private pool needs a CUDA device, found ", device);
  id_ = instance().create_pool(device);
}
PrivatePool::~PrivatePool() { instance().release_pool(id_); }
PoolStats PrivatePool::stats() const { return instance().pool_stats(id_); }

PoolGuard::PoolGuard(PrivatePool& pool, const Stream& stream)
    : device_(stream.device().index), stream_(stream.handle()) {
  MICROLLM_CHECK(stream.device() == pool.device(), "cuda allocator", "a pool of ", pool.device(),
                 " cannot serve a stream of ", stream.device());
  previous_ = instance().route(device_, stream_, pool.id());
}
PoolGuard::~PoolGuard() { instance().route(device_, stream_, previous_); }

}  // namespace microllm::cuda
