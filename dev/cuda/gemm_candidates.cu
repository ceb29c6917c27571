// Lab: how far the cuBLASLt heuristic's first algorithm is from the fastest of its candidates
// on the training step's GEMMs (8,192 tokens of the Qwen2.5-0.5B shape, or with `1.5b` of
// the DeepSeek-R1-Distill-Qwen-1.5B shape; BF16 in and out, F32 accumulation), the way
// src/cuda/gemm.cpp calls cuBLASLt: row-major C (M, N) = op(A)·op(B) as the column-major
// Cᵀ = op(B)ᵀ·op(A)ᵀ, beta 0, a 32 MiB workspace.
//
// For each of a linear layer's three products (forward y = x·Wᵀ, input gradient dx = dy·W,
// weight gradient dW = dyᵀ·x) of each projection, the program asks the heuristic for up to
// 32 candidates, times every one, checks each against the first candidate's output (the same
// products, different summation orders: relative L2 error), and prints the first, the
// fastest, and the step time the fastest would save (×layers for the layer products, ×1 for
// the LM head). Two timings a candidate:
//   - warm: the median of 30 launches after 5, back to back, as src/cuda/gemm.cpp's measured
//     plans time them (the operands stay in the L2 where they fit);
//   - cold: the median of 15 single launches, each after a write of twice the L2, so every
//     operand comes from HBM, as a product's weights do in a training step.
// "same bits" is the fastest candidate whose output equals the first's bit for bit (what
// the measured plans may choose), by its warm time; the summary adds up each choice's cold
// time over the step, to show whether the warm choice also wins cold.
//
//   make -C dev/cuda build/gemm_candidates && ./dev/cuda/build/gemm_candidates [0.5b|1.5b]
#include <cublasLt.h>

#include <cstring>
#include <string>

#include "common.h"

#define CUBLAS_CHECK(call)                                                                     \
  do {                                                                                         \
    const cublasStatus_t s_ = (call);                                                          \
    if (s_ != CUBLAS_STATUS_SUCCESS) {                                                         \
      std::fprintf(stderr, "cuBLAS error %d at %s:%d in %s\n", static_cast<int>(s_), __FILE__, \
                   __LINE__, #call);                                                           \
      std::exit(1);                                                                            \
    }                                                                                          \
  } while (0)

namespace {

constexpr size_t kWorkspaceBytes = 32ull << 20;
constexpr int kCandidates = 32;

// One row-major product C (M, N) = op(A)·op(B); A stored (M, K) or, transposed, (K, M);
// B stored (K, N) or, transposed, (N, K). `count` is how often it runs in one training step.
struct Product {
  std::string name;
  int64_t M, N, K;
  bool trans_a, trans_b;
  int count;
};

// Column-major layout of a stored row-major (rows, cols) matrix.
cublasLtMatrixLayout_t layout(int64_t rows, int64_t cols) {
  cublasLtMatrixLayout_t l;
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&l, CUDA_R_16BF, cols, rows, cols));
  return l;
}

__global__ void to_float(const __nv_bfloat16* in, float* out, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    out[i] = __bfloat162float(in[i]);
}

double relative_l2(const std::vector<float>& got, const std::vector<float>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double d = double(got[i]) - ref[i];
    num += d * d;
    den += double(ref[i]) * ref[i];
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

std::vector<float> read_back(const __nv_bfloat16* c, int64_t n, float* scratch) {
  to_float<<<1024, 256>>>(c, scratch, n);
  CUDA_CHECK(cudaGetLastError());
  std::vector<float> host(n);
  CUDA_CHECK(cudaMemcpy(host.data(), scratch, n * sizeof(float), cudaMemcpyDeviceToHost));
  return host;
}

}  // namespace

int main(int argc, char** argv) {
  const cudaDeviceProp prop = lab::require_device("gemm_candidates");
  const std::string shape = argc > 1 ? argv[1] : "0.5b";
  if (shape != "0.5b" && shape != "1.5b") {
    std::fprintf(stderr, "gemm_candidates: expected the shape 0.5b or 1.5b, found '%s'\n",
                 shape.c_str());
    return 2;
  }
  cublasLtHandle_t handle;
  CUBLAS_CHECK(cublasLtCreate(&handle));
  void* workspace = nullptr;
  CUDA_CHECK(cudaMalloc(&workspace, kWorkspaceBytes));
  // Written before each cold launch: twice the L2, so nothing of the operands stays there.
  const size_t flush_bytes = 2 * static_cast<size_t>(prop.l2CacheSize);
  void* flush = nullptr;
  CUDA_CHECK(cudaMalloc(&flush, flush_bytes));

  // Qwen2.5-0.5B: C 896, Q/K/V 14 + 2 × 2 heads of 64, F 4,864, 24 layers; the 1.5B shape:
  // C 1,536, 12 + 2 × 2 heads of 128, F 8,960, 28 layers. 8,192 tokens (B 8, T 1,024).
  const bool big = shape == "1.5b";
  const int64_t T = 8192, H = big ? 1536 : 896, QKV = big ? 2048 : 1152, I = big ? 8960 : 4864;
  const int64_t V = 151936;
  const int layers = big ? 28 : 24;
  // (name, M, N, K, trans_a, trans_b, count a step)
  std::vector<Product> products;
  auto linear = [&](const std::string& name, int64_t in, int64_t out, int count) {
    products.push_back({name + " fwd", T, out, in, false, true, count});  // x (T,in)·W(out,in)ᵀ
    products.push_back({name + " dx", T, in, out, false, false, count});  // dy (T,out)·W
    products.push_back({name + " dW", out, in, T, true, false, count});   // dy (T,out)ᵀ·x (T,in)
  };
  linear("qkv", H, QKV, layers);
  linear("o", H, H, layers);
  linear("gate_up", H, 2 * I, layers);
  linear("down", I, H, layers);
  linear("lm_head", H, V, 1);
  std::printf("shape %s on %s (L2 %d MB)\n", shape.c_str(), prop.name, prop.l2CacheSize >> 20);

  size_t max_a = 0, max_b = 0, max_c = 0;
  for (const Product& p : products) {
    max_a = std::max<size_t>(max_a, p.M * p.K);
    max_b = std::max<size_t>(max_b, p.K * p.N);
    max_c = std::max<size_t>(max_c, p.M * p.N);
  }
  __nv_bfloat16 *a, *b, *c, *c_ref;
  float* scratch;
  CUDA_CHECK(cudaMalloc(&a, max_a * 2));
  CUDA_CHECK(cudaMalloc(&b, max_b * 2));
  CUDA_CHECK(cudaMalloc(&c, max_c * 2));
  CUDA_CHECK(cudaMalloc(&c_ref, max_c * 2));
  CUDA_CHECK(cudaMalloc(&scratch, max_c * 4));
  {
    const auto ha = lab::random_bf16(max_a, 1), hb = lab::random_bf16(max_b, 2, -0.05f, 0.05f);
    CUDA_CHECK(cudaMemcpy(a, ha.data(), max_a * 2, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(b, hb.data(), max_b * 2, cudaMemcpyHostToDevice));
  }

  double step_first_us = 0, step_best_us = 0;
  // Cold time of each choice over the step: the first, the warm same-bits choice, the cold
  // same-bits choice.
  double cold_first_us = 0, cold_warm_choice_us = 0, cold_cold_choice_us = 0;
  std::printf("%-14s %6s %6s %6s %4s %9s %9s %6s %5s %9s %8s  %s\n", "product", "M", "N", "K", "n",
              "first us", "best us", "ratio", "best#", "TFLOP/s", "rel err",
              "same bits: warm# cold# | cold us: first, warm#, cold#");
  lab::EventTimer timer;
  // Median microseconds of single launches of run(), each after the flush.
  auto median_cold_us = [&](auto&& run_once) {
    std::vector<double> us;
    for (int r = 0; r < 15; ++r) {
      CUDA_CHECK(cudaMemsetAsync(flush, r & 0xff, flush_bytes));
      timer.start();
      run_once();
      us.push_back(1000.0 * timer.stop_ms());
    }
    return lab::median(us);
  };
  for (const Product& p : products) {
    cublasLtMatmulDesc_t op;
    CUBLAS_CHECK(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    // cuBLASLt's A is our B, its B our A.
    const cublasOperation_t ta = p.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t tb = p.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
    cublasLtMatrixLayout_t la = p.trans_b ? layout(p.N, p.K) : layout(p.K, p.N);
    cublasLtMatrixLayout_t lb = p.trans_a ? layout(p.K, p.M) : layout(p.M, p.K);
    cublasLtMatrixLayout_t lc = layout(p.M, p.N);
    cublasLtMatmulPreference_t pref;
    CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    const uint64_t ws = kWorkspaceBytes;
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
    cublasLtMatmulHeuristicResult_t results[kCandidates] = {};
    int found = 0;
    CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(handle, op, la, lb, lc, lc, pref, kCandidates,
                                                results, &found));
    const float alpha = 1.0f, beta = 0.0f;
    auto run = [&](int i, __nv_bfloat16* out) {
      CUBLAS_CHECK(cublasLtMatmul(handle, op, &alpha, b, la, a, lb, &beta, out, lc, out, lc,
                                  &results[i].algo, workspace, kWorkspaceBytes, nullptr));
    };
    run(0, c_ref);
    const std::vector<float> ref = read_back(c_ref, p.M * p.N, scratch);
    double first_us = 0, best_us = 1e30, worst_err = 0;
    int best = 0;
    std::vector<double> warm(found), cold(found);
    std::vector<bool> same(found);
    std::string all;
    for (int i = 0; i < found; ++i) {
      warm[i] = lab::median_launch_us([&](int) { run(i, c); }, 1, 5, 30);
      cold[i] = median_cold_us([&] { run(i, c); });
      const std::vector<float> got = read_back(c, p.M * p.N, scratch);
      const double err = i == 0 ? 0 : relative_l2(got, ref);
      same[i] = std::memcmp(got.data(), ref.data(), got.size() * sizeof(float)) == 0;
      if (i == 0) first_us = warm[i];
      worst_err = std::max(worst_err, err);
      if (warm[i] < best_us) best_us = warm[i], best = i;
      char buf[48];
      std::snprintf(buf, sizeof(buf), " %.0f/%.0f%s", warm[i], cold[i], same[i] ? "" : "*");
      all += buf;
    }
    // The same-bits choices by warm and by cold time (the first candidate always qualifies).
    int warm_choice = 0, cold_choice = 0;
    for (int i = 1; i < found; ++i) {
      if (!same[i]) continue;
      if (warm[i] < warm[warm_choice]) warm_choice = i;
      if (cold[i] < cold[cold_choice]) cold_choice = i;
    }
    const double flops = 2.0 * p.M * p.N * p.K;
    std::printf(
        "%-14s %6ld %6ld %6ld %4d %9.1f %9.1f %6.3f %5d %9.0f %8.1e  %2d %2d | %.1f %.1f %.1f\n",
        p.name.c_str(), long(p.M), long(p.N), long(p.K), found, first_us, best_us,
        first_us / best_us, best, flops / best_us * 1e-6, worst_err, warm_choice, cold_choice,
        cold[0], cold[warm_choice], cold[cold_choice]);
    std::printf("    candidates (warm/cold us, * other bits):%s\n", all.c_str());
    step_first_us += p.count * first_us;
    step_best_us += p.count * best_us;
    cold_first_us += p.count * cold[0];
    cold_warm_choice_us += p.count * cold[warm_choice];
    cold_cold_choice_us += p.count * cold[cold_choice];
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatrixLayoutDestroy(la);
    cublasLtMatrixLayoutDestroy(lb);
    cublasLtMatrixLayoutDestroy(lc);
    cublasLtMatmulDescDestroy(op);
  }
  std::printf("step GEMMs: first %.2f ms, fastest candidates %.2f ms (saves %.2f ms)\n",
              step_first_us * 1e-3, step_best_us * 1e-3, (step_first_us - step_best_us) * 1e-3);
  std::printf(
      "step GEMMs cold: first %.2f ms, same-bits warm choice %.2f ms, same-bits cold "
      "choice %.2f ms\n",
      cold_first_us * 1e-3, cold_warm_choice_us * 1e-3, cold_cold_choice_us * 1e-3);
  return 0;
}
