// A CUDA injection library that records the GPU start and end of every kernel a program runs,
// CUDA-graph nodes included, through CUPTI's activity API (CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL,
// which does not serialize kernels), and writes them as CSV when the program exits. It sees a
// decode step as the CUDA graph runs it, with programmatic launches overlapping, which Nsight
// Compute (serialized kernels, flushed caches) cannot show. No change to the program traced:
//
//   export CUDA_INJECTION64_PATH=build/cuda-release/bench/libmicrollm_kernel_trace.so
//   MICROLLM_KERNEL_TRACE=trace.csv microllm_bench_generate --config ... --device cuda
//   tools/profile/kernel_trace_table.py trace.csv
//
// The CUDA driver loads the library named by CUDA_INJECTION64_PATH when it initializes and calls
// its InitializeInjection. The CSV (MICROLLM_KERNEL_TRACE, default kernel-trace.csv) has one row
// per kernel: start and end in ns of the GPU clock, the graph and graph node (0 outside graphs),
// the stream, the grid and block sizes, registers per thread and the demangled name.
#include <cupti.h>
#include <cxxabi.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

namespace {

struct KernelRecord {
  uint64_t start, end, graph_node;
  uint32_t graph, stream;
  int32_t grid[3], block[3];
  uint16_t registers;
  std::string name;
};

std::mutex records_mutex;
std::vector<KernelRecord> records;  // guarded by records_mutex
std::atomic<uint64_t> dropped{0};   // records CUPTI could not store
constexpr size_t kBufferBytes = size_t{8} << 20;
constexpr size_t kAlignment = 8;

void report(CUptiResult result, const char* what) {
  if (result == CUPTI_SUCCESS) return;
  const char* text = nullptr;
  cuptiGetResultString(result, &text);
  std::fprintf(stderr, "kernel_trace: %s failed: %s\n", what, text ? text : "unknown error");
}

std::string demangled(const char* name) {
  if (name == nullptr) return "?";
  int status = 0;
  char* readable = abi::__cxa_demangle(name, nullptr, nullptr, &status);
  std::string out = status == 0 && readable ? readable : name;
  std::free(readable);
  return out;
}

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(kAlignment, kBufferBytes));
  *size = *buffer ? kBufferBytes : 0;
  *max_records = 0;  // as many as fit
}

void CUPTIAPI buffer_completed(CUcontext context, uint32_t stream, uint8_t* buffer, size_t,
                               size_t valid) {
  std::vector<KernelRecord> batch;
  CUpti_Activity* record = nullptr;
  while (cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
    if (record->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) continue;
    const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
    batch.push_back({k->start,
                     k->end,
                     k->graphNodeId,
                     k->graphId,
                     k->streamId,
                     {k->gridX, k->gridY, k->gridZ},
                     {k->blockX, k->blockY, k->blockZ},
                     k->registersPerThread,
                     demangled(k->name)});
  }
  std::free(buffer);
  size_t lost = 0;
  if (cuptiActivityGetNumDroppedRecords(context, stream, &lost) == CUPTI_SUCCESS) dropped += lost;
  const std::lock_guard<std::mutex> lock(records_mutex);
  records.insert(records.end(), batch.begin(), batch.end());
}

// CSV quoting: the name in double quotes, inner quotes doubled.
std::string quoted(const std::string& text) {
  std::string out = "\"";
  for (char c : text) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

void write_trace() {
  report(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), "cuptiActivityFlushAll");
  const char* path = std::getenv("MICROLLM_KERNEL_TRACE");
  if (path == nullptr || *path == '\0') path = "kernel-trace.csv";
  std::FILE* out = std::fopen(path, "w");
  if (out == nullptr) {
    std::fprintf(stderr, "kernel_trace: cannot write %s: %s\n", path, std::strerror(errno));
    return;
  }
  std::fprintf(out, "start_ns,end_ns,graph,graph_node,stream,grid,block,registers,name\n");
  const std::lock_guard<std::mutex> lock(records_mutex);
  for (const KernelRecord& r : records)
    std::fprintf(out, "%llu,%llu,%u,%llu,%u,%d x %d x %d,%d x %d x %d,%u,%s\n",
                 static_cast<unsigned long long>(r.start), static_cast<unsigned long long>(r.end),
                 r.graph, static_cast<unsigned long long>(r.graph_node), r.stream, r.grid[0],
                 r.grid[1], r.grid[2], r.block[0], r.block[1], r.block[2], r.registers,
                 quoted(r.name).c_str());
  std::fclose(out);
  std::fprintf(stderr, "kernel_trace: %zu kernels written to %s (%llu records dropped)\n",
               records.size(), path, static_cast<unsigned long long>(dropped.load()));
}

}  // namespace

// Called by the CUDA driver at initialization (CUDA_INJECTION64_PATH); 1 on success.
extern "C" int InitializeInjection(void) {
  static bool initialized = false;
  if (initialized) return 1;
  initialized = true;
  report(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed),
         "cuptiActivityRegisterCallbacks");
  const CUptiResult enabled = cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
  report(enabled, "cuptiActivityEnable(CONCURRENT_KERNEL)");
  if (enabled != CUPTI_SUCCESS) return 0;
  std::atexit(write_trace);
  return 1;
}
