// Lab: how far the cuBLASLt heuristic's first algorithm is from the fastest of its candidates
// on the training step's GEMMs (Qwen2.5-0.5B shape, 8,192 tokens, BF16 in and out, F32
// accumulation), the way src/cuda/gemm.cpp calls cuBLASLt: row-major C (M, N) = op(A)·op(B)
// as the column-major Cᵀ = op(B)ᵀ·op(A)ᵀ, beta 0, a 32 MiB workspace.
//
// For each of a linear layer's three products (forward y = x·Wᵀ, input gradient dx = dy·W,
// weight gradient dW = dyᵀ·x) of each projection, the program asks the heuristic for up to
// 32 candidates, times every one (median of 30 launches after 5, inputs beyond the L2 are
// not rotated: the operands are tens to hundreds of MB), checks each against the first
// candidate's output (the same products, different summation orders: relative L2 error),
// and prints the first, the fastest, and the step time the fastest would save (×24 layers
// for the layer products, ×1 for the LM head).
//
//   make -C dev/cuda build/gemm_candidates && ./dev/cuda/build/gemm_candidates
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

int main() {
  lab::require_device("gemm_candidates");
  cublasLtHandle_t handle;
  CUBLAS_CHECK(cublasLtCreate(&handle));
  void* workspace = nullptr;
  CUDA_CHECK(cudaMalloc(&workspace, kWorkspaceBytes));

  const int64_t T = 8192, H = 896, QKV = 1152, I = 4864, V = 151936;
  // (name, M, N, K, trans_a, trans_b, count a step)
  std::vector<Product> products;
  auto linear = [&](const std::string& name, int64_t in, int64_t out, int count) {
    products.push_back({name + " fwd", T, out, in, false, true, count});  // x (T,in)·W(out,in)ᵀ
    products.push_back({name + " dx", T, in, out, false, false, count});  // dy (T,out)·W
    products.push_back({name + " dW", out, in, T, true, false, count});   // dy (T,out)ᵀ·x (T,in)
  };
  linear("qkv", H, QKV, 24);
  linear("o", H, H, 24);
  linear("gate_up", H, 2 * I, 24);
  linear("down", I, H, 24);
  linear("lm_head", H, V, 1);

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
  std::printf("%-14s %6s %6s %6s %4s %9s %9s %6s %5s %9s %8s\n", "product", "M", "N", "K", "n",
              "first us", "best us", "ratio", "best#", "TFLOP/s", "rel err");
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
    std::string all;
    for (int i = 0; i < found; ++i) {
      const double us = lab::median_launch_us([&](int) { run(i, c); }, 1, 5, 30);
      if (i == 0) first_us = us;
      const double err = i == 0 ? 0 : relative_l2(read_back(c, p.M * p.N, scratch), ref);
      worst_err = std::max(worst_err, err);
      if (us < best_us) best_us = us, best = i;
      char buf[32];
      std::snprintf(buf, sizeof(buf), " %.0f", us);
      all += buf;
    }
    const double flops = 2.0 * p.M * p.N * p.K;
    std::printf("%-14s %6ld %6ld %6ld %4d %9.1f %9.1f %6.3f %5d %9.0f %8.1e\n", p.name.c_str(),
                long(p.M), long(p.N), long(p.K), found, first_us, best_us, first_us / best_us, best,
                flops / best_us * 1e-6, worst_err);
    std::printf("    candidates (us):%s\n", all.c_str());
    step_first_us += p.count * first_us;
    step_best_us += p.count * best_us;
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatrixLayoutDestroy(la);
    cublasLtMatrixLayoutDestroy(lb);
    cublasLtMatrixLayoutDestroy(lc);
    cublasLtMatmulDescDestroy(op);
  }
  std::printf("step GEMMs: first %.2f ms, fastest candidates %.2f ms (saves %.2f ms)\n",
              step_first_us * 1e-3, step_best_us * 1e-3, (step_first_us - step_best_us) * 1e-3);
  return 0;
}
