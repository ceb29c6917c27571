// The kernel lab's shared helpers (see README.md): CUDA error checks, the device check,
// CUDA-event timing with medians, random BF16 inputs, NaN poisoning, comparison against a
// CPU reference with a tolerance per dtype, and the napkin math that relates a measured time
// to the H200's measured ceilings. Host code only; every lab file includes it.
//
// The lab is a set of standalone programs, so errors print and exit here (library code in
// src/ throws instead).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace lab {

// Ceilings measured on the project's H200: device-to-device copy (bytes read + written) and
// a dense BF16 GEMM of 8192³ through cuBLASLt.
constexpr double kCopyBytesPerSecond = 4.25e12;
constexpr double kBf16DenseFlopsPerSecond = 794e12;

// ---- errors and the device ------------------------------------------------------------

inline void cuda_check(cudaError_t status, const char* call, const char* file, int line) {
  if (status == cudaSuccess) return;
  std::fprintf(stderr, "CUDA error at %s:%d: %s (%s)\n  in %s\n", file, line,
               cudaGetErrorString(status), cudaGetErrorName(status), call);
  std::exit(1);
}
#define CUDA_CHECK(call) ::lab::cuda_check((call), #call, __FILE__, __LINE__)

// The current device's properties, or a clear message and exit code 2 when there is no GPU
// (the lab builds anywhere; it runs only where a GPU is).
inline cudaDeviceProp require_device(const char* program) {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess || count == 0) {
    std::fprintf(stderr, "%s: no CUDA device available (%s); the kernel lab needs a GPU to run\n",
                 program, status != cudaSuccess ? cudaGetErrorString(status) : "0 devices");
    std::exit(2);
  }
  cudaDeviceProp prop;
  CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s, sm_%d%d, %d SMs, %.0f MiB L2, %.1f GiB\n", prop.name, prop.major,
              prop.minor, prop.multiProcessorCount, prop.l2CacheSize / 1048576.0,
              static_cast<double>(prop.totalGlobalMem) / (1u << 30));
  return prop;
}

// Exits with a clear message when `kernel` has no image for this GPU (built for another
// architecture), instead of failing at the first launch.
template <class Kernel>
void require_kernel_image(const char* program, Kernel kernel) {
  cudaFuncAttributes attributes;
  const cudaError_t status = cudaFuncGetAttributes(&attributes, kernel);
  if (status != cudaSuccess) {
    std::fprintf(stderr, "%s: kernels not built for this GPU (%s); rebuild with make ARCH=<arch>\n",
                 program, cudaGetErrorString(status));
    std::exit(2);
  }
}

// ---- timing -----------------------------------------------------------------------------

class EventTimer {
 public:
  EventTimer() {
    CUDA_CHECK(cudaEventCreate(&start_));
    CUDA_CHECK(cudaEventCreate(&stop_));
  }
  ~EventTimer() {
    cudaEventDestroy(start_);
    cudaEventDestroy(stop_);
  }
  EventTimer(const EventTimer&) = delete;
  EventTimer& operator=(const EventTimer&) = delete;

  void start(cudaStream_t stream = nullptr) { CUDA_CHECK(cudaEventRecord(start_, stream)); }
  // Milliseconds since start(); waits for the stream to reach this point.
  float stop_ms(cudaStream_t stream = nullptr) {
    CUDA_CHECK(cudaEventRecord(stop_, stream));
    CUDA_CHECK(cudaEventSynchronize(stop_));
    float ms = 0.0f;
    CUDA_CHECK(cudaEventElapsedTime(&ms, start_, stop_));
    return ms;
  }

 private:
  cudaEvent_t start_ = nullptr, stop_ = nullptr;
};

inline double median(std::vector<double> values) {
  if (values.empty()) return NAN;
  const size_t mid = values.size() / 2;
  std::nth_element(values.begin(), values.begin() + mid, values.end());
  if (values.size() % 2 == 1) return values[mid];
  const double upper = values[mid];
  return (*std::max_element(values.begin(), values.begin() + mid) + upper) / 2.0;
}

// Median microseconds of one launch. launch(i) enqueues launch number i (i picks a rotating
// buffer, see copies_beyond_l2). `warmup` launches first (clocks up, caches of code and
// descriptors warm), then `reps` repetitions of `per_rep` back-to-back launches, each
// repetition timed with a pair of events; the median is robust to the odd slow repetition.
template <class Launch>
double median_launch_us(Launch&& launch, int per_rep, int warmup = 10, int reps = 50) {
  for (int i = 0; i < warmup; ++i) launch(i);
  CUDA_CHECK(cudaGetLastError());
  CUDA_CHECK(cudaDeviceSynchronize());
  EventTimer timer;
  std::vector<double> us;
  for (int r = 0; r < reps; ++r) {
    timer.start();
    for (int i = 0; i < per_rep; ++i) launch(i);
    us.push_back(1000.0 * timer.stop_ms() / per_rep);
  }
  CUDA_CHECK(cudaGetLastError());
  return median(us);
}

// How many copies of a `bytes` buffer to cycle through so that every launch reads its copy
// from HBM, not from L2: the copies together are at least twice the L2. A decode step reads
// each weight once per token and the model is far larger than L2, so cold reads are the
// honest case; a buffer already larger than twice the L2 needs one copy.
inline int copies_beyond_l2(size_t bytes, const cudaDeviceProp& prop, int max_copies = 512) {
  const double need = 2.0 * prop.l2CacheSize / static_cast<double>(std::max<size_t>(bytes, 1));
  return std::clamp(static_cast<int>(std::ceil(need)), 1, max_copies);
}

// ---- inputs and poisoning ----------------------------------------------------------------

// SplitMix64: a seed gives the same inputs on every machine.
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t next_u64() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  // Uniform in [lo, hi) from the top 24 bits.
  float uniform(float lo, float hi) {
    return lo + (hi - lo) * static_cast<float>(next_u64() >> 40) * (1.0f / 16777216.0f);
  }

 private:
  uint64_t state_;
};

// n BF16 values uniform in [lo, hi), none of them zero: zeros would let a kernel that skips
// or misplaces elements pass, and would time a data path the real inputs never take.
inline std::vector<__nv_bfloat16> random_bf16(size_t n, uint64_t seed, float lo = -1.0f,
                                              float hi = 1.0f) {
  Rng rng(seed);
  std::vector<__nv_bfloat16> out(n);
  for (size_t i = 0; i < n; ++i) {
    float v = rng.uniform(lo, hi);
    if (__bfloat162float(__float2bfloat16(v)) == 0.0f) v = 0.5f * (lo + hi) + 0.25f * (hi - lo);
    out[i] = __float2bfloat16(v);
  }
  return out;
}

// All-ones bytes are a NaN in F32, F16 and BF16: an output element the kernel forgets to
// write fails validation instead of passing on a stale value from an earlier run.
inline void poison_nan(void* device_ptr, size_t bytes) {
  CUDA_CHECK(cudaMemset(device_ptr, 0xFF, bytes));
}

// ---- validation ------------------------------------------------------------------------

// Per output dtype, for inputs uniform in [-1, 1], F32 accumulation over up to ~10^4 terms,
// against an F64 reference. An element passes when |got - ref| <= atol + rtol·|ref|; the
// output passes when every element does, every element is finite, and
// ||got - ref||₂ / ||ref||₂ <= rel_l2. The rtol of F16/BF16 is four times the worst
// relative rounding of the stored output (2^-11, 2^-9).
struct Tolerance {
  const char* dtype;
  double atol, rtol, rel_l2;
};
constexpr Tolerance kToleranceF32{"f32", 1e-3, 1e-4, 1e-5};
constexpr Tolerance kToleranceF16{"f16", 1e-3, 1.0 / 512, 1.0 / 1024};
constexpr Tolerance kToleranceBF16{"bf16", 1e-3, 1.0 / 128, 1.0 / 256};

struct Comparison {
  double max_abs = 0.0;  // max |got - ref|
  double rel_l2 = 0.0;   // ||got - ref||₂ / ||ref||₂
  int64_t outside = 0;   // elements outside atol + rtol·|ref| (non-finite ones included)
  int64_t non_finite = 0;
  bool ok = false;
};

// Compares n values; prints the first few elements outside the tolerance under `name`.
inline Comparison compare(const char* name, const float* got, const double* ref, int64_t n,
                          const Tolerance& tol) {
  Comparison c;
  double err2 = 0.0, ref2 = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    const double g = got[i], r = ref[i], e = std::fabs(g - r);
    const bool finite = std::isfinite(g);
    if (!finite) ++c.non_finite;
    if (!finite || e > tol.atol + tol.rtol * std::fabs(r)) {
      if (c.outside < 5)
        std::printf("  %s[%lld] = %.6g, expected %.6g (%s tolerance)\n", name,
                    static_cast<long long>(i), g, r, tol.dtype);
      ++c.outside;
    }
    if (finite) {
      c.max_abs = std::max(c.max_abs, e);
      err2 += e * e;
    }
    ref2 += r * r;
  }
  c.rel_l2 = ref2 > 0.0 ? std::sqrt(err2 / ref2) : std::sqrt(err2);
  c.ok = c.outside == 0 && c.non_finite == 0 && c.rel_l2 <= tol.rel_l2;
  return c;
}

inline std::vector<float> to_float(const std::vector<__nv_bfloat16>& values) {
  std::vector<float> out(values.size());
  for (size_t i = 0; i < values.size(); ++i) out[i] = __bfloat162float(values[i]);
  return out;
}

// ---- napkin math -----------------------------------------------------------------------

// A time next to the two ceilings: `bytes` is the least traffic the operation needs (each
// input read once, each output written once), `flops` counts a multiply-add as 2.
struct Napkin {
  double us, gb_per_s, bandwidth_pct, tflop_per_s, flop_pct;
};
inline Napkin napkin(double us, double bytes, double flops) {
  const double seconds = us * 1e-6;
  return {us, bytes / seconds / 1e9, 100.0 * bytes / seconds / kCopyBytesPerSecond,
          flops / seconds / 1e12, 100.0 * flops / seconds / kBf16DenseFlopsPerSecond};
}
inline void print_napkin(const Napkin& n) {
  std::printf("%9.2f us %8.1f GB/s %5.1f %% of 4.25 TB/s %7.2f TFLOP/s %5.2f %% of 794", n.us,
              n.gb_per_s, n.bandwidth_pct, n.tflop_per_s, n.flop_pct);
}

}  // namespace lab
