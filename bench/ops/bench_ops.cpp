// microllm_bench_ops: times one case per operator family on cuda:0 and prints one JSON
// document on stdout (schema microllm-bench-ops-v1; bench/ops/torch_ops.py prints the same
// shape for PyTorch, and bench/ops/run_ops_bench.py pairs both into records).
//
// Method (/work/.library/device/METHOD.md): random inputs (never zeros), warm-up first,
// then one pair of CUDA events per repetition on microllm's current stream; the samples are
// the per-repetition event times. When a case's working set is under 2 × L2 the inputs
// rotate over several sets, so repeated runs do not measure the cache. Bytes are the
// fewest a kernel must move (each input read once, each output written once); FLOPs count
// the useful arithmetic. Ceilings are the measured H200 ones of SPEC §8 / GPU.md.
// Errors (out of memory, a missing kernel) are reported in the case's entry; the run goes on.
#include <cuda_runtime_api.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "../kernel_switches.h"
#include "microllm/autograd/node.h"
#include "microllm/core/random.h"
#include "microllm/core/tensor.h"
#include "microllm/cuda/allocator.h"
#include "microllm/cuda/gemm.h"
#include "microllm/cuda/runtime.h"
#include "microllm/ops/ops.h"

namespace {

using microllm::Device;
using microllm::DType;
using microllm::Shape;
using microllm::Tensor;
namespace ops = microllm::ops;
namespace cuda = microllm::cuda;
using Json = nlohmann::ordered_json;

const Device kGpu = Device::cuda(0);

// Measured ceilings on the H200 used here (SPEC §8, GPU.md).
constexpr double kCopyTBps = 4.25;       // device-to-device copy, bytes read + written
constexpr double kBf16GemmTFlops = 794;  // dense BF16 GEMM 8192³
constexpr double kF32GemmTFlops = 51;    // F32 GEMM without TF32

// Inputs rotate over several sets when a case touches less than 2 × L2 (H200: 50 MiB), and
// the sets together hold at least 3 × L2 of inputs. torch_ops.py uses the same rule.
constexpr double kL2Bytes = 50.0 * 1024 * 1024;
constexpr int kMaxInputSets = 8;

struct Options {
  int warmup = 10;
  int repetitions = 100;
  std::string filter;  // comma-separated substrings; a case runs if any matches
  bool list = false;
  int64_t attention_batch = 8;   // B of the attention cases
  double max_case_seconds = 30;  // repetitions are cut so one case stays under this
  uint64_t seed = 1;
};

// One benchmark case. `setup(sets)` allocates `sets` input sets and returns the timed call,
// which takes the index of the input set to use.
struct Case {
  std::string name, family, dtype;
  Json shape;
  double bytes = 0, flops = 0;  // per repetition
  double input_bytes = 0;       // bytes of one input set
  std::string formula;
  std::string bound;   // "memory" or "compute"
  double ceiling = 0;  // TB/s for memory-bound, TFLOP/s for compute-bound
  std::string ceiling_name;
  bool needs_grad = false;
  std::string notes;
  int max_input_sets = kMaxInputSets;  // decode cases rotate more, small weights fit in L2
  std::function<std::function<void(int)>(int)> setup;
};

std::string dtype_label(DType dtype) { return dtype == DType::BF16 ? "bf16" : "f32"; }
double element_size(DType dtype) { return dtype == DType::BF16 ? 2.0 : 4.0; }

// Random device tensors without drawing every element on the host: a pool of normal
// samples is drawn once per dtype, and each tensor is tiled from windows of the pool at
// offsets that depend on the seed, so every input set holds different values.
class RandomSource {
 public:
  explicit RandomSource(uint64_t seed) : seed_(seed) {}

  Tensor normal(const Shape& shape, DType dtype) {
    const Tensor& pool = pool_for(dtype);
    Tensor out = Tensor::empty(shape, dtype, kGpu);
    Tensor flat = out.view({out.numel()});  // (n)
    microllm::Generator offsets(seed_ ^ (++draws_ * 0x9e3779b97f4a7c15ull));
    for (int64_t start = 0; start < out.numel(); start += kWindow) {
      const int64_t length = std::min(kWindow, out.numel() - start);
      const int64_t offset = static_cast<int64_t>(offsets.next_u64() % (kPool - kWindow + 1));
      flat.narrow(0, start, length).copy_from(pool.narrow(0, offset, length));
    }
    return out;
  }

 private:
  static constexpr int64_t kWindow = int64_t{1} << 22;  // elements per tiled window
  static constexpr int64_t kPool = 2 * kWindow;         // elements in the pool

  const Tensor& pool_for(DType dtype) {
    Tensor& pool = dtype == DType::BF16 ? bf16_pool_ : f32_pool_;
    if (!pool.defined()) {
      microllm::Generator gen(seed_);
      pool = microllm::randn({kPool}, gen, dtype, kGpu);  // (kPool)
    }
    return pool;
  }

  uint64_t seed_;
  uint64_t draws_ = 0;
  Tensor f32_pool_, bf16_pool_;
};

// ---- cases ---------------------------------------------------------------------------------

Case gemm_case(RandomSource& rng, const std::string& label, int64_t M, int64_t N, int64_t K,
               DType dtype) {
  const double es = element_size(dtype);
  Case c;
  c.name = "gemm_" + dtype_label(dtype) + (label.empty() ? "" : "_" + label) + "_" +
           std::to_string(M) + "x" + std::to_string(N) + "x" + std::to_string(K);
  c.family = "gemm";
  c.dtype = dtype_label(dtype);
  c.shape = {{"M", M}, {"N", N}, {"K", K}};
  c.input_bytes = es * double(M * K + N * K);
  c.bytes = c.input_bytes + es * double(M * N);
  c.flops = 2.0 * double(M) * double(N) * double(K);
  c.formula = "out (M,N) = x (M,K) · w (N,K)ᵀ [matmul trans_b, as linear]; bytes = " +
              std::to_string(int(es)) + "·(M·K + N·K + M·N); flops = 2·M·N·K";
  c.bound = "compute";
  c.ceiling = dtype == DType::BF16 ? kBf16GemmTFlops : kF32GemmTFlops;
  c.ceiling_name = dtype == DType::BF16 ? "bf16_gemm_tflops" : "f32_gemm_tflops";
  if (dtype == DType::F32) c.notes = "TF32 off (cuda::set_allow_tf32(false))";
  c.setup = [&rng, M, N, K, dtype](int sets) {
    std::vector<Tensor> x, w;
    for (int i = 0; i < sets; ++i) {
      x.push_back(rng.normal({M, K}, dtype));  // (M, K) activations
      w.push_back(rng.normal({N, K}, dtype));  // (N, K) weight, Hugging Face orientation
    }
    return std::function<void(int)>([x, w](int i) { ops::matmul(x[i], w[i], false, true); });
  };
  return c;
}

Case rms_norm_case(RandomSource& rng, int64_t R, int64_t C, DType dtype) {
  const double es = element_size(dtype);
  Case c;
  c.name = "rms_norm_" + dtype_label(dtype) + "_" + std::to_string(R) + "x" + std::to_string(C);
  c.family = "rms_norm";
  c.dtype = dtype_label(dtype);
  c.shape = {{"rows", R}, {"C", C}};
  c.input_bytes = es * double(R * C + C);
  c.bytes = c.input_bytes + es * double(R * C);
  c.flops = 4.0 * double(R) * double(C);
  c.formula = "y = x · rsqrt(mean(x²) + 1e-6) · w; bytes = es·(2·R·C + C); flops ≈ 4·R·C";
  c.bound = "memory";
  c.ceiling = kCopyTBps;
  c.ceiling_name = "copy_tbps";
  c.setup = [&rng, R, C, dtype](int sets) {
    std::vector<Tensor> x, w;
    for (int i = 0; i < sets; ++i) {
      x.push_back(rng.normal({R, C}, dtype));  // (R, C)
      w.push_back(rng.normal({C}, dtype));     // (C)
    }
    return std::function<void(int)>([x, w](int i) { ops::rms_norm(x[i], w[i], 1e-6); });
  };
  return c;
}

Case softmax_case(RandomSource& rng, int64_t R, int64_t C, DType dtype) {
  const double es = element_size(dtype);
  Case c;
  c.name = "softmax_" + dtype_label(dtype) + "_" + std::to_string(R) + "x" + std::to_string(C);
  c.family = "softmax";
  c.dtype = dtype_label(dtype);
  c.shape = {{"rows", R}, {"C", C}};
  c.input_bytes = es * double(R * C);
  c.bytes = 2.0 * c.input_bytes;
  c.flops = 5.0 * double(R) * double(C);
  c.formula =
      "softmax over the last dim; bytes = es·2·R·C; flops ≈ 5·R·C (max, sub, exp, sum, div)";
  c.bound = "memory";
  c.ceiling = kCopyTBps;
  c.ceiling_name = "copy_tbps";
  c.setup = [&rng, R, C, dtype](int sets) {
    std::vector<Tensor> x;
    for (int i = 0; i < sets; ++i) x.push_back(rng.normal({R, C}, dtype));  // (R, C)
    return std::function<void(int)>([x](int i) { ops::softmax(x[i], -1); });
  };
  return c;
}

// Causal GQA attention at (B, H, Hkv, T, D), through ops::attention's default backend.
Case attention_case(RandomSource& rng, int64_t B, int64_t H, int64_t Hkv, int64_t T, int64_t D,
                    bool backward) {
  const double es = 2.0;
  const double q_elems = double(B * H * T * D), kv_elems = double(B * Hkv * T * D);
  const double forward_flops = 2.0 * double(B) * H * double(T) * double(T) * D;
  Case c;
  c.name = std::string(backward ? "attention_fwdbwd" : "attention_fwd") + "_bf16_b" +
           std::to_string(B) + "_h" + std::to_string(H) + "_kv" + std::to_string(Hkv) + "_t" +
           std::to_string(T) + "_d" + std::to_string(D);
  c.family = backward ? "attention_fwdbwd" : "attention_fwd";
  c.dtype = "bf16";
  c.shape = {{"B", B}, {"H", H}, {"Hkv", Hkv}, {"T", T}, {"D", D}, {"causal", true}};
  c.bound = "compute";
  c.ceiling = kBf16GemmTFlops;
  c.ceiling_name = "bf16_gemm_tflops";
  c.needs_grad = backward;
  c.notes = "ops::attention, default backend (flash: tensor-core tiles, saves the log-sum-exp)";
  if (!backward) {
    c.input_bytes = es * (q_elems + 2 * kv_elems);
    c.bytes = c.input_bytes + es * q_elems;
    c.flops = forward_flops;
    c.formula =
        "causal GQA; bytes = 2·(2·B·H·T·D + 2·B·Hkv·T·D) (q, k, v read, o written); "
        "flops = 2·B·H·T²·D (Q·Kᵀ and P·V, 4·B·H·T²·D, half under the causal mask)";
  } else {
    c.input_bytes = es * (2 * q_elems + 2 * kv_elems);
    c.bytes = 2.0 * c.input_bytes;
    c.flops = 3.5 * forward_flops;
    c.formula =
        "causal GQA forward + backward; bytes = 2·(4·B·H·T·D + 4·B·Hkv·T·D) (q, k, v, "
        "dO read; o, dq, dk, dv written); flops = 7·B·H·T²·D (forward 2·B·H·T²·D, "
        "backward 2.5× forward, as FlashAttention counts)";
  }
  c.setup = [&rng, B, H, Hkv, T, D, backward](int sets) {
    std::vector<Tensor> q, k, v, dout;
    for (int i = 0; i < sets; ++i) {
      q.push_back(rng.normal({B, H, T, D}, DType::BF16));    // (B, H, T, D)
      k.push_back(rng.normal({B, Hkv, T, D}, DType::BF16));  // (B, Hkv, T, D)
      v.push_back(rng.normal({B, Hkv, T, D}, DType::BF16));  // (B, Hkv, T, D)
      if (backward) {
        dout.push_back(rng.normal({B, H, T, D}, DType::BF16));  // (B, H, T, D)
        q.back().set_requires_grad(true);
        k.back().set_requires_grad(true);
        v.back().set_requires_grad(true);
      }
    }
    ops::AttentionOptions options;
    options.causal = true;
    if (!backward) {
      return std::function<void(int)>(
          [q, k, v, options](int i) { ops::attention(q[i], k[i], v[i], options); });
    }
    return std::function<void(int)>([q, k, v, dout, options](int i) mutable {
      Tensor out = ops::attention(q[i], k[i], v[i], options);  // (B, H, T, D)
      out.backward(dout[i]);
      // Drop the gradients so the next repetition writes fresh ones instead of accumulating.
      q[i].zero_grad();
      k[i].zero_grad();
      v[i].zero_grad();
    });
  };
  return c;
}

Case add_case(RandomSource& rng, int64_t R, int64_t C, DType dtype) {
  const double es = element_size(dtype);
  Case c;
  c.name = "add_" + dtype_label(dtype) + "_64m";
  c.family = "add";
  c.dtype = dtype_label(dtype);
  c.shape = {{"rows", R}, {"C", C}, {"elements", R * C}};
  c.input_bytes = es * 2.0 * double(R * C);
  c.bytes = es * 3.0 * double(R * C);
  c.flops = double(R * C);
  c.formula = "out = a + b; bytes = es·3·N; flops = N";
  c.bound = "memory";
  c.ceiling = kCopyTBps;
  c.ceiling_name = "copy_tbps";
  c.setup = [&rng, R, C, dtype](int sets) {
    std::vector<Tensor> a, b;
    for (int i = 0; i < sets; ++i) {
      a.push_back(rng.normal({R, C}, dtype));  // (R, C)
      b.push_back(rng.normal({R, C}, dtype));  // (R, C)
    }
    return std::function<void(int)>([a, b](int i) { ops::add(a[i], b[i]); });
  };
  return c;
}

Case swiglu_case(RandomSource& rng, int64_t R, int64_t F) {
  const double es = 2.0;
  Case c;
  c.name = "swiglu_bf16_" + std::to_string(R) + "x" + std::to_string(F);
  c.family = "swiglu";
  c.dtype = "bf16";
  c.shape = {{"rows", R}, {"F", F}};
  c.input_bytes = es * 2.0 * double(R * F);
  c.bytes = es * 3.0 * double(R * F);
  c.flops = 5.0 * double(R) * double(F);
  c.formula = "out = silu(gate) · up; bytes = 2·3·R·F; flops ≈ 5·R·F (neg, exp, add, div, mul)";
  c.bound = "memory";
  c.ceiling = kCopyTBps;
  c.ceiling_name = "copy_tbps";
  c.setup = [&rng, R, F](int sets) {
    std::vector<Tensor> gate, up;
    for (int i = 0; i < sets; ++i) {
      gate.push_back(rng.normal({R, F}, DType::BF16));  // (R, F)
      up.push_back(rng.normal({R, F}, DType::BF16));    // (R, F)
    }
    return std::function<void(int)>([gate, up](int i) { ops::swiglu(gate[i], up[i]); });
  };
  return c;
}

// The decode projection at M ≤ 8 rows (ops::gemv_out): y (M, N) = x (M, K) · w (N, K)ᵀ, or
// with `swiglu` the fused gate/up weight (2N, K) and y = silu(gate)·up. Bound by streaming
// the weight; enough input sets rotate that each call reads its weight from DRAM.
Case gemv_case(RandomSource& rng, const std::string& label, int64_t M, int64_t N, int64_t K,
               bool swiglu) {
  const int64_t rows = swiglu ? 2 * N : N;
  Case c;
  c.name = "gemv_bf16_" + label + "_m" + std::to_string(M) + "_" + std::to_string(rows) + "x" +
           std::to_string(K);
  c.family = "gemv";
  c.dtype = "bf16";
  c.shape = {{"M", M}, {"N", rows}, {"K", K}, {"swiglu", swiglu}};
  c.input_bytes = 2.0 * double(M * K + rows * K);
  c.bytes = c.input_bytes + 2.0 * double(M * N);
  c.flops = 2.0 * double(M) * double(rows) * double(K);
  c.formula = std::string(swiglu ? "out (M,N) = silu(x·gateᵀ)·(x·upᵀ), w (2N,K) = [gate; up]"
                                 : "out (M,N) = x (M,K) · w (N,K)ᵀ") +
              "; bytes = 2·(M·K + rows·K + M·N); flops = 2·M·rows·K";
  c.bound = "memory";
  c.ceiling = kCopyTBps;
  c.ceiling_name = "copy_tbps";
  c.max_input_sets = 160;
  c.notes = "ops::gemv_out (the decode GEMV)";
  c.setup = [&rng, M, N, K, rows, swiglu](int sets) {
    std::vector<Tensor> x, w, y;
    for (int i = 0; i < sets; ++i) {
      x.push_back(rng.normal({M, K}, DType::BF16));           // (M, K)
      w.push_back(rng.normal({rows, K}, DType::BF16));        // (rows, K)
      y.push_back(Tensor::empty({M, N}, DType::BF16, kGpu));  // (M, N)
    }
    const ops::GemvEpilogue epi = swiglu ? ops::GemvEpilogue::swiglu : ops::GemvEpilogue::none;
    return std::function<void(int)>(
        [x, w, y, epi](int i) { ops::gemv_out(x[i], w[i], Tensor(), y[i], epi); });
  };
  return c;
}

// The decode projections of the Qwen2.5-0.5B (C 896, F 4864, qkv 1152) and
// DeepSeek-R1-Distill-Qwen-1.5B (C 1536, F 8960, qkv 2048) shapes, V = 151936, M = 1, 4, 8.
void add_gemv_cases(RandomSource& rng, std::vector<Case>& cases) {
  struct Model {
    const char* name;
    int64_t C, F, qkv;
  };
  for (const Model& m : {Model{"qwen0.5b", 896, 4864, 1152}, Model{"r1d1.5b", 1536, 8960, 2048}})
    for (int64_t M : {1, 4, 8}) {
      const std::string p = m.name;
      cases.push_back(gemv_case(rng, p + "_qkv", M, m.qkv, m.C, false));
      cases.push_back(gemv_case(rng, p + "_o", M, m.C, m.C, false));
      cases.push_back(gemv_case(rng, p + "_gate_up", M, m.F, m.C, true));
      cases.push_back(gemv_case(rng, p + "_down", M, m.C, m.F, false));
      cases.push_back(gemv_case(rng, p + "_lm_head", M, 151936, m.C, false));
    }
}

// Qwen2.5-0.5B training shapes at 8192 tokens: C = 896, F = 4864, V = 151936.
std::vector<Case> all_cases(RandomSource& rng, const Options& options) {
  constexpr int64_t M = 8192, C = 896, F = 4864, V = 151936;
  std::vector<Case> cases = {
      gemm_case(rng, "", M, C, C, DType::BF16),
      gemm_case(rng, "", M, F, C, DType::BF16),
      gemm_case(rng, "", M, C, F, DType::BF16),
      gemm_case(rng, "lm_head", M, V, C, DType::BF16),
      gemm_case(rng, "", 4096, 4096, 4096, DType::F32),
      rms_norm_case(rng, M, C, DType::BF16),
      rms_norm_case(rng, M, C, DType::F32),
      softmax_case(rng, M, 4096, DType::BF16),
      softmax_case(rng, M, 4096, DType::F32),
      attention_case(rng, options.attention_batch, 14, 2, 1024, 64, false),
      attention_case(rng, options.attention_batch, 14, 2, 1024, 64, true),
      attention_case(rng, 4, 16, 8, 2048, 128, false),
      attention_case(rng, 4, 16, 8, 2048, 128, true),
      add_case(rng, 8192, 8192, DType::BF16),
      add_case(rng, 8192, 8192, DType::F32),
      swiglu_case(rng, M, F),
  };
  add_gemv_cases(rng, cases);
  return cases;
}

bool selected(const std::string& name, const std::string& filter) {
  if (filter.empty()) return true;
  std::stringstream parts(filter);
  std::string part;
  while (std::getline(parts, part, ','))
    if (!part.empty() && name.find(part) != std::string::npos) return true;
  return false;
}

// Input sets: 1 when a repetition moves 2 × L2 or more, else enough sets to hold 3 × L2 of
// inputs (at least 2, at most kMaxInputSets).
int input_sets_for(const Case& c) {
  if (c.bytes >= 2 * kL2Bytes) return 1;
  const int wanted = static_cast<int>(std::ceil(3 * kL2Bytes / std::max(c.input_bytes, 1.0)));
  return std::clamp(wanted, 2, c.max_input_sets);
}

double median(std::vector<double> values) {
  if (values.empty()) return NAN;
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

Json nullable(double value) { return std::isfinite(value) ? Json(value) : Json(nullptr); }

// Warm-up, then one event pair per repetition. Fills entry's samples and repetition counts.
void run_case(const Case& c, const Options& options, Json& entry) {
  const int sets = input_sets_for(c);
  entry["input_sets"] = sets;
  std::optional<microllm::autograd::NoGradGuard> no_grad;
  if (!c.needs_grad) no_grad.emplace();
  const std::function<void(int)> call = c.setup(sets);
  const cuda::Stream stream = cuda::current_stream(kGpu);
  cuda::synchronize(stream);
  cuda::reset_peak_stats(kGpu);

  // Warm-up; its last call is timed to estimate one repetition (the first ones carry
  // module loading and GEMM heuristics).
  cuda::Event warm_start(true), warm_end(true);
  for (int i = 0; i < options.warmup; ++i) {
    if (i == options.warmup - 1) warm_start.record(stream);
    call(i % sets);
  }
  warm_end.record(stream);
  warm_end.synchronize();
  int repetitions = options.repetitions;
  if (options.warmup > 0) {
    const double estimate_ms = warm_start.elapsed_ms(warm_end);
    const double budget_ms = options.max_case_seconds * 1000.0;
    if (estimate_ms * repetitions > budget_ms)
      repetitions = std::max(5, static_cast<int>(budget_ms / std::max(estimate_ms, 1e-3)));
    repetitions = std::min(repetitions, options.repetitions);
  }

  std::vector<std::unique_ptr<cuda::Event>> starts, ends;
  for (int i = 0; i < repetitions; ++i) {
    starts.push_back(std::make_unique<cuda::Event>(true));
    ends.push_back(std::make_unique<cuda::Event>(true));
  }
  for (int i = 0; i < repetitions; ++i) {
    starts[i]->record(stream);
    call(i % sets);
    ends[i]->record(stream);
  }
  cuda::synchronize(stream);
  std::vector<double> samples;
  for (int i = 0; i < repetitions; ++i) {
    const double ms = starts[i]->elapsed_ms(*ends[i]);
    samples.push_back(std::round(ms * 1e6) / 1e6);  // event resolution is ~0.5 µs
  }
  entry["repetitions"] = repetitions;
  entry["samples_ms"] = samples;
  entry["peak_allocated_bytes"] = cuda::allocator_stats(kGpu).peak_allocated_bytes;

  const double med = median(samples);
  const double seconds = med * 1e-3;
  const double gbps = c.bytes / seconds / 1e9, tflops = c.flops / seconds / 1e12;
  entry["median_ms"] = nullable(med);
  entry["achieved_gbps"] = nullable(gbps);
  entry["achieved_tflops"] = nullable(tflops);
  entry["ceiling_ratio"] =
      nullable(c.bound == "memory" ? gbps / 1e3 / c.ceiling : tflops / c.ceiling);
}

Json device_info() {
  Json info;
  cudaDeviceProp prop{};
  int driver = 0, runtime = 0;
  if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess) {
    info["name"] = prop.name;
    info["compute_capability"] = std::to_string(prop.major) + "." + std::to_string(prop.minor);
    info["sm_count"] = prop.multiProcessorCount;
    info["l2_bytes"] = prop.l2CacheSize;
    info["memory_bytes"] = prop.totalGlobalMem;
  }
  if (cudaDriverGetVersion(&driver) == cudaSuccess)
    info["cuda_driver_api"] =
        std::to_string(driver / 1000) + "." + std::to_string(driver % 1000 / 10);
  if (cudaRuntimeGetVersion(&runtime) == cudaSuccess)
    info["cuda_runtime"] =
        std::to_string(runtime / 1000) + "." + std::to_string(runtime % 1000 / 10);
  cudaGetLastError();  // a failed query must not leak into the first case
  return info;
}

Json describe_case(const Case& c, const Options& options) {
  Json entry;
  entry["name"] = c.name;
  entry["family"] = c.family;
  entry["dtype"] = c.dtype;
  entry["shape"] = c.shape;
  entry["warmup"] = options.warmup;
  entry["repetitions"] = 0;
  entry["repetitions_requested"] = options.repetitions;
  entry["input_sets"] = 0;
  entry["samples_ms"] = Json::array();
  entry["bytes"] = c.bytes;
  entry["flops"] = c.flops;
  entry["formula"] = c.formula;
  entry["bound"] = c.bound;
  entry["ceiling"] = {{"name", c.ceiling_name},
                      {"value", c.ceiling},
                      {"units", c.bound == "memory" ? "TB/s" : "TFLOP/s"}};
  entry["notes"] = c.notes + microllm::bench::kernel_switches_note();  // "" when no switch is set
  entry["error"] = nullptr;
  return entry;
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  CLI::App app{"microllm_bench_ops: time one case per operator family on cuda:0; JSON on stdout"};
  app.add_option("--warmup", options.warmup, "untimed calls before timing")
      ->check(CLI::Range(0, 1000000))
      ->capture_default_str();
  app.add_option("--repetitions", options.repetitions, "timed calls per case")
      ->check(CLI::Range(1, 1000000))
      ->capture_default_str();
  app.add_option("--filter", options.filter,
                 "run cases whose name contains one of these comma-separated substrings");
  app.add_flag("--list", options.list, "print the case names and exit");
  app.add_option("--attention-batch", options.attention_batch, "B of the attention cases")
      ->check(CLI::Range(int64_t{1}, int64_t{1024}))
      ->capture_default_str();
  app.add_option("--max-case-seconds", options.max_case_seconds,
                 "cut repetitions so one case's timed part stays under this")
      ->check(CLI::Range(1e-3, 86400.0))
      ->capture_default_str();
  app.add_option("--seed", options.seed, "seed of the random inputs")->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }

  RandomSource rng(options.seed);
  std::vector<Case> cases = all_cases(rng, options);
  if (options.list) {
    for (const Case& c : cases)
      if (selected(c.name, options.filter)) std::cout << c.name << "\n";
    return 0;
  }

  Json doc;
  doc["schema"] = "microllm-bench-ops-v1";
  doc["tool"] = "microllm";
  doc["argv"] = std::vector<std::string>(argv, argv + argc);
  doc["settings"] = {
      {"warmup", options.warmup},
      {"repetitions", options.repetitions},
      {"filter", options.filter},
      {"attention_batch", options.attention_batch},
      {"max_case_seconds", options.max_case_seconds},
      {"seed", options.seed},
      {"l2_bytes_assumed", kL2Bytes},
      {"rotation",
       "input sets rotate when bytes < 2·L2: sets = clamp(ceil(3·L2 / input bytes), 2, 8)"}};
  doc["ceilings"] = {{"copy_tbps", kCopyTBps},
                     {"bf16_gemm_tflops", kBf16GemmTFlops},
                     {"f32_gemm_tflops", kF32GemmTFlops},
                     {"source", "SPEC §8 / GPU.md, measured on the H200"}};
  doc["timing"] =
      "CUDA events around each repetition on microllm's current stream after warm-up; "
      "host launch overhead shows only where it exceeds the GPU time of the previous call";
  doc["cases"] = Json::array();

  if (!cuda::is_available()) {
    doc["error"] = "CUDA unavailable: " + cuda::unavailable_reason();
    std::cout << doc.dump(2, ' ', false, Json::error_handler_t::replace) << std::endl;
    std::fprintf(stderr, "microllm_bench_ops: %s\n", doc["error"].get<std::string>().c_str());
    return 2;
  }
  bool any_error = false;
  try {
    cuda::set_device(kGpu);
    cuda::set_allow_tf32(false);
    doc["device"] = device_info();
  } catch (const std::exception& e) {
    doc["error"] = std::string("device setup failed: ") + e.what();
    std::cout << doc.dump(2, ' ', false, Json::error_handler_t::replace) << std::endl;
    return 2;
  }

  for (const Case& c : cases) {
    if (!selected(c.name, options.filter)) continue;
    Json entry = describe_case(c, options);
    std::fprintf(stderr, "microllm_bench_ops: %-44s ", c.name.c_str());
    try {
      run_case(c, options, entry);
      std::fprintf(stderr, "median %.4f ms over %d\n",
                   entry["median_ms"].is_number() ? entry["median_ms"].get<double>() : NAN,
                   entry["repetitions"].get<int>());
    } catch (const std::exception& e) {
      any_error = true;
      entry["error"] = e.what();
      entry["samples_ms"] = Json::array();
      entry["repetitions"] = 0;
      std::fprintf(stderr, "error: %s\n", e.what());
      cudaGetLastError();  // clear a non-sticky error so the next case starts clean
    }
    doc["cases"].push_back(entry);
    try {
      cuda::synchronize(cuda::current_stream(kGpu));
      cuda::empty_cache(kGpu);  // the next case starts from an empty cache
    } catch (const std::exception& e) {
      std::fprintf(stderr, "microllm_bench_ops: cleanup after %s failed: %s\n", c.name.c_str(),
                   e.what());
    }
  }
  std::cout << doc.dump(2, ' ', false, Json::error_handler_t::replace) << std::endl;
  return any_error ? 1 : 0;
}
