// cuBLASLt GEMM (see include/microllm/cuda/gemm.h).
//
// Row-major C (M, N) = op(A)·op(B) is computed as the column-major product
// Cᵀ (N, M) = op(B)ᵀ·op(A)ᵀ: the B buffer is cuBLASLt's "A", the A buffer its "B", and
// a row-major matrix with row stride ld is a column-major matrix of swapped dimensions with
// the same ld. The bias epilogue adds one value per row of Cᵀ, i.e. per output feature N.
//
// Plans. GemmMode::fast asks the heuristic once per exact problem (M included) and may get
// split-K. GemmMode::batch_invariant asks once per problem with M left out — for a layout
// with kInvariantM rows — keeps the first algorithm that splits no K and reduces nothing
// (forcing SPLITK_NUM = 1 and REDUCTION_SCHEME_NONE when none does), checks it for each new M
// with cublasLtMatmulAlgoCheck, and runs it for every M: the same kernel, tile shape and
// K loop then produce every output tile, however many tiles M makes, so row r does not
// depend on how many rows share the GEMM (tests/cuda/test_gemm_batch_invariant_cuda.cpp).
// Alignment classes (16 bytes or not) stay in both keys: they change which kernels are legal.
//
// Measured plans (GemmMode::fast, on unless set_gemm_measured_plans(false) or
// MICROLLM_GEMM_MEASURE=0). The heuristic's first candidate is not always its fastest: on the
// training step's GEMMs others are up to 1.19× faster (dev/cuda/gemm_candidates.cu). For a
// problem of at least kMeasuredMinFlops with 16-byte aligned operands, outside a graph
// capture, the plan is chosen once by running the heuristic's candidates on the call's own
// operands: a candidate qualifies only if its output has the first candidate's bits (the
// fingerprint of src/cuda/output_fingerprint.h), and the fastest qualifying one is kept.
// Candidates with another summation order (split-K, other K tiling) write other bits on
// dense data, so the plan gives the first candidate's results whatever the timings say, and
// runs, resumes and tests keep their bits. An output with more than half of its elements
// +0 is too sparse to tell orders apart; its plan is the first candidate.
#include "microllm/cuda/gemm.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <tuple>
#include <vector>

#include "microllm/cuda/allocator.h"
#include "microllm/cuda/check.h"
#include "microllm/cuda/runtime.h"
#include "output_fingerprint.h"

namespace microllm::cuda {
namespace {

constexpr size_t kWorkspaceBytes = 32ull << 20;  // cuBLAS' recommendation for Hopper
// Rows of the layout a batch-invariant plan is chosen for: a decode batch or a prefill chunk
// is near it, and its tiles suit both (one plan serves every M, so none is ideal for all).
constexpr int64_t kInvariantM = 256;
constexpr int kInvariantCandidates = 16;  // heuristic results scanned for one without split-K

std::atomic<bool> g_allow_tf32{false};
std::atomic<int> g_measured_plans{-1};  // -1: not read from the environment yet

// Measured plans (see the file comment): problems below this many FLOPs keep the first
// candidate (a microsecond's difference does not pay for the measurement); up to
// kMeasuredCandidates heuristic results are tried, each timed over kTimedSamples samples of
// kRunsPerSample back-to-back runs after the run whose output is compared.
constexpr double kMeasuredMinFlops = 2.0e9;
constexpr int kMeasuredCandidates = 16;
constexpr int kTimedSamples = 5;
constexpr int kRunsPerSample = 3;

// A rank-3 operand as cuBLASLt will read it: a (possibly flipped) dense row-major matrix.
struct Operand {
  Tensor tensor;    // keeps a dense copy alive when one was needed
  bool transposed;  // op to apply to the stored row-major matrix
  int64_t rows, cols, ld, batch_stride;
};

Operand make_operand(const Tensor& t, bool trans) {
  const int64_t rows = t.shape()[1], cols = t.shape()[2];
  const int64_t s_row = t.strides()[1], s_col = t.strides()[2];
  const int64_t batch_stride = t.shape()[0] == 1 ? 0 : t.strides()[0];
  // One row is read in place as a row-major matrix whatever its row stride (ld = cols), so a
  // single-row product keeps the layout, and the batch-invariant plan, of a many-row one.
  if ((s_col == 1 || cols == 1) && (rows == 1 || s_row >= std::max<int64_t>(cols, 1)))
    return {t, trans, rows, cols, rows == 1 ? std::max<int64_t>(cols, 1) : s_row, batch_stride};
  if ((s_row == 1 || rows == 1) &&
      s_col >= std::max<int64_t>(rows, 1))  // a transposed dense matrix
    return {t, !trans, cols, rows, s_col, batch_stride};
  Tensor dense = t.contiguous();
  return {dense, trans, rows, cols, cols, t.shape()[0] == 1 ? 0 : rows * cols};
}

cudaDataType_t cuda_type(DType dtype) {
  switch (dtype) {
    case DType::F32:
      return CUDA_R_32F;
    case DType::BF16:
      return CUDA_R_16BF;
    case DType::F16:
      return CUDA_R_16F;
    default:
      MICROLLM_FAIL("cuda gemm", "unsupported dtype ", dtype, " (expected f32, bf16 or f16)");
  }
}

struct LtHandle {
  cublasLtHandle_t handle = nullptr;
  LtHandle() { CUBLAS_CHECK(cublasLtCreate(&handle)); }
};

cublasLtHandle_t lt_handle(int device) {
  static std::mutex mutex;
  static std::map<int, LtHandle*> handles;  // one per device, never destroyed
  std::lock_guard<std::mutex> lock(mutex);
  auto& h = handles[device];
  if (!h) h = new LtHandle();
  return h->handle;
}

// One workspace per stream: two streams must never share one. Never freed. Made before a
// capture (reserve_gemm_workspace): made during one, it would come from the graph's pool.
void* workspace_for(const Stream& stream) {
  static std::mutex mutex;
  static std::map<std::pair<int, cudaStream_t>, void*> workspaces;
  std::lock_guard<std::mutex> lock(mutex);
  void*& ws = workspaces[{stream.device().index, stream.handle()}];
  if (!ws) {
    MICROLLM_CHECK(!is_capturing(stream), "cuda gemm", "no cuBLASLt workspace exists for this ",
                   stream.device(),
                   " stream and it is capturing a CUDA graph; call "
                   "cuda::reserve_gemm_workspace(stream) before capture (CudaGraph does)");
    StreamGuard guard(stream);
    ws = allocate(kWorkspaceBytes, stream.device());
  }
  return ws;
}

// Everything that decides the algorithm choice.
using ShapeKey = std::tuple<int, int, bool, bool, int64_t, int64_t, int64_t, int64_t, int64_t,
                            int64_t, int64_t, int64_t, int64_t, bool, bool, bool>;
std::mutex g_cache_mutex;
std::map<ShapeKey, cublasLtMatmulAlgo_t> g_algorithms;
int64_t g_measured_plans_made = 0;
int64_t g_measured_plans_not_first = 0;

// A batch-invariant plan: the key has no M (and no M-dependent stride of a or out).
struct InvariantPlan {
  cublasLtMatmulAlgo_t algorithm;
  std::set<int64_t> checked_m;  // row counts cublasLtMatmulAlgoCheck accepted
};
std::map<ShapeKey, InvariantPlan> g_invariant_plans;

// RAII holders for the descriptors of one call.
struct Descriptors {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulPreference_t preference = nullptr;
  ~Descriptors() {
    if (preference) cublasLtMatmulPreferenceDestroy(preference);
    if (c) cublasLtMatrixLayoutDestroy(c);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

// Column-major layout of a stored row-major (rows, cols) matrix: (cols, rows) with the same ld.
void make_layout(cublasLtMatrixLayout_t* layout, cudaDataType_t type, int64_t rows, int64_t cols,
                 int64_t ld, int64_t batch, int64_t batch_stride) {
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(layout, type, static_cast<uint64_t>(cols),
                                          static_cast<uint64_t>(rows), ld));
  if (batch > 1) {
    const int32_t count = static_cast<int32_t>(batch);
    CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(*layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT,
                                                  &count, sizeof(count)));
    CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(
        *layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &batch_stride, sizeof(batch_stride)));
  }
}

// Bytes of alignment the plan may assume for a pointer: 16 when it has them, else one element.
uint32_t alignment_class(const void* ptr, DType dtype) {
  return reinterpret_cast<uintptr_t>(ptr) % 16 == 0 ? 16u
                                                    : static_cast<uint32_t>(dtype_size(dtype));
}

int32_t algo_config_i32(const cublasLtMatmulAlgo_t& algo, cublasLtMatmulAlgoConfigAttributes_t a) {
  int32_t value = 0;
  size_t written = 0;
  CUBLAS_CHECK(cublasLtMatmulAlgoConfigGetAttribute(&algo, a, &value, sizeof(value), &written));
  return value;
}

// Layouts of one problem with `m` output rows; a's M-dependent dimension, ld and batch
// stride follow m (the caller's own values when m is the real M).
struct Layouts {
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  Layouts(cudaDataType_t type, const Operand& oa, const Operand& ob, int64_t real_m, int64_t m,
          int64_t n, int64_t batch);
  ~Layouts() {
    if (c) cublasLtMatrixLayoutDestroy(c);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
  }
  Layouts(const Layouts&) = delete;
  Layouts& operator=(const Layouts&) = delete;
};

Layouts::Layouts(cudaDataType_t type, const Operand& oa, const Operand& ob, int64_t real_m,
                 int64_t m, int64_t n, int64_t batch) {
  // cuBLASLt's A is our B and its B is our A (see the file comment).
  make_layout(&a, type, ob.rows, ob.cols, ob.ld, batch, ob.batch_stride);
  if (m == real_m) {
    make_layout(&b, type, oa.rows, oa.cols, oa.ld, batch, oa.batch_stride);
  } else if (!oa.transposed) {  // stored (M, K)
    make_layout(&b, type, m, oa.cols, oa.ld, batch, oa.batch_stride == 0 ? 0 : m * oa.ld);
  } else {  // stored (K, M)
    const int64_t ld = std::max(oa.ld, m);
    make_layout(&b, type, oa.rows, m, ld, batch, oa.batch_stride == 0 ? 0 : oa.rows * ld);
  }
  make_layout(&c, type, m, n, n, batch, m * n);
}

// True when cuBLASLt accepts `algo` for the problem with `m` rows.
bool algo_fits(cublasLtHandle_t handle, cublasLtMatmulDesc_t op, const Layouts& l,
               const cublasLtMatmulAlgo_t& algo) {
  cublasLtMatmulHeuristicResult_t result{};
  const cublasStatus_t status =
      cublasLtMatmulAlgoCheck(handle, op, l.a, l.b, l.c, l.c, &algo, &result);
  return status == CUBLAS_STATUS_SUCCESS && result.workspaceSize <= kWorkspaceBytes;
}

// The batch-invariant algorithm for this problem (see the file comment).
cublasLtMatmulAlgo_t choose_invariant_algorithm(cublasLtHandle_t handle, cublasLtMatmulDesc_t op,
                                                cudaDataType_t type, const Operand& oa,
                                                const Operand& ob, const Tensor& out,
                                                const Tensor& bias, int64_t M, int64_t N, int64_t K,
                                                int64_t batch) {
  const Layouts rep(type, oa, ob, M, kInvariantM, N, batch);
  const Layouts one(type, oa, ob, M, 1, N, batch);
  cublasLtMatmulPreference_t preference = nullptr;
  CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&preference));
  struct PreferenceHolder {
    cublasLtMatmulPreference_t p;
    ~PreferenceHolder() { cublasLtMatmulPreferenceDestroy(p); }
  } holder{preference};
  const uint64_t ws = kWorkspaceBytes;
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
  // Only what every call of this key guarantees: its pointers' alignment class.
  const DType dtype = out.dtype();
  const uint32_t align_lt_a = alignment_class(ob.tensor.raw_data(), dtype);
  const uint32_t align_lt_b = alignment_class(oa.tensor.raw_data(), dtype);
  const uint32_t align_c = alignment_class(out.raw_data(), dtype);
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_lt_a, sizeof(align_lt_a)));
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_lt_b, sizeof(align_lt_b)));
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_c, sizeof(align_c)));
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_c, sizeof(align_c)));
  cublasLtMatmulHeuristicResult_t results[kInvariantCandidates] = {};
  int found = 0;
  CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(handle, op, rep.a, rep.b, rep.c, rep.c, preference,
                                              kInvariantCandidates, results, &found));
  for (int i = 0; i < found; ++i) {
    const cublasLtMatmulAlgo_t& algo = results[i].algo;
    if (results[i].state != CUBLAS_STATUS_SUCCESS) continue;
    if (algo_config_i32(algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM) > 1) continue;
    if (algo_config_i32(algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME) != 0) continue;
    if (algo_fits(handle, op, one, algo)) return algo;
  }
  // Every candidate splits K: take the first one with the split turned off.
  for (int i = 0; i < found; ++i) {
    if (results[i].state != CUBLAS_STATUS_SUCCESS) continue;
    cublasLtMatmulAlgo_t algo = results[i].algo;
    const int32_t splits = 1;
    const uint32_t scheme = CUBLASLT_REDUCTION_SCHEME_NONE;
    CUBLAS_CHECK(cublasLtMatmulAlgoConfigSetAttribute(&algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM,
                                                      &splits, sizeof(splits)));
    CUBLAS_CHECK(cublasLtMatmulAlgoConfigSetAttribute(&algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME,
                                                      &scheme, sizeof(scheme)));
    if (algo_fits(handle, op, rep, algo) && algo_fits(handle, op, one, algo)) return algo;
  }
  MICROLLM_FAIL("cuda gemm", "cuBLASLt offers no batch-invariant algorithm (no split-K, valid for ",
                "M = 1 and M = ", kInvariantM, ") for N=", N, " K=", K, " batch=", batch, " dtype ",
                dtype, bias.defined() ? " with bias" : "", " (", found, " candidates)");
}

// Median microseconds of one run of `algo` (see kTimedSamples), which has just run once (its
// fingerprint's run is the warm-up).
double median_run_us(const std::function<cublasStatus_t(const cublasLtMatmulAlgo_t&)>& run,
                     const cublasLtMatmulAlgo_t& algo, const Stream& stream) {
  Event start(true), stop(true);
  std::vector<double> us;
  for (int sample = 0; sample < kTimedSamples; ++sample) {
    start.record(stream);
    for (int r = 0; r < kRunsPerSample; ++r) CUBLAS_CHECK(run(algo));
    stop.record(stream);
    stop.synchronize();
    us.push_back(1000.0 * start.elapsed_ms(stop) / kRunsPerSample);
  }
  std::nth_element(us.begin(), us.begin() + kTimedSamples / 2, us.end());
  return us[kTimedSamples / 2];
}

// The measured plan (see the file comment): the fastest of `found` heuristic results whose
// output on the call's operands has the bits of results[0]'s. `run` writes `out`.
cublasLtMatmulAlgo_t choose_measured_algorithm(
    const cublasLtMatmulHeuristicResult_t* results, int found,
    const std::function<cublasStatus_t(const cublasLtMatmulAlgo_t&)>& run, const Tensor& out,
    const Stream& stream) {
  CUBLAS_CHECK(run(results[0].algo));
  const OutputFingerprint reference = output_fingerprint(out);
  const int64_t units = out.numel() * static_cast<int64_t>(dtype_size(out.dtype())) / 2;
  if (found < 2 || reference.nonzero_units * 2 < units) return results[0].algo;
  int best = 0;
  double best_us = median_run_us(run, results[0].algo, stream);
  for (int i = 1; i < found; ++i) {
    if (run(results[i].algo) != CUBLAS_STATUS_SUCCESS) continue;
    if (!(output_fingerprint(out) == reference)) continue;
    const double us = median_run_us(run, results[i].algo, stream);
    if (us < best_us) best = i, best_us = us;
  }
  return results[best].algo;
}

}  // namespace

void set_gemm_measured_plans(bool on) { g_measured_plans = on ? 1 : 0; }

bool gemm_measured_plans() {
  int value = g_measured_plans.load(std::memory_order_relaxed);
  if (value < 0) {
    const char* env = std::getenv("MICROLLM_GEMM_MEASURE");
    int expected = -1;
    g_measured_plans.compare_exchange_strong(expected, env && std::strcmp(env, "0") == 0 ? 0 : 1);
    value = g_measured_plans.load();
  }
  return value == 1;
}

GemmMeasuredPlanCounts gemm_measured_plan_counts() {
  std::lock_guard<std::mutex> lock(g_cache_mutex);
  return {g_measured_plans_made, g_measured_plans_not_first};
}

void set_allow_tf32(bool allow) { g_allow_tf32 = allow; }
bool allow_tf32() { return g_allow_tf32; }

int64_t gemm_algorithm_cache_size() {
  std::lock_guard<std::mutex> lock(g_cache_mutex);
  return static_cast<int64_t>(g_algorithms.size());
}

void reserve_gemm_workspace(const Stream& stream) { workspace_for(stream); }

int64_t gemm_invariant_plan_count() {
  std::lock_guard<std::mutex> lock(g_cache_mutex);
  return static_cast<int64_t>(g_invariant_plans.size());
}

void gemm(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, const Tensor& bias,
          const Tensor& out, GemmMode mode) {
  const Device device = out.device();
  const int64_t batch = out.shape()[0], M = out.shape()[1], N = out.shape()[2];
  const Operand oa = make_operand(a, trans_a);
  const Operand ob = make_operand(b, trans_b);
  const int64_t K = oa.transposed ? oa.rows : oa.cols;
  const cudaDataType_t type = cuda_type(out.dtype());
  const bool tf32 = out.dtype() == DType::F32 && allow_tf32();
  const cublasComputeType_t compute = tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  const Stream stream = current_stream(device);
  const cublasLtHandle_t handle = lt_handle(device.index);

  Descriptors d;
  CUBLAS_CHECK(cublasLtMatmulDescCreate(&d.op, compute, CUDA_R_32F));
  // cuBLASLt's A is our B and its B is our A (see the file comment).
  const cublasOperation_t op_lt_a = ob.transposed ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_lt_b = oa.transposed ? CUBLAS_OP_T : CUBLAS_OP_N;
  CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSA, &op_lt_a, sizeof(op_lt_a)));
  CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSB, &op_lt_b, sizeof(op_lt_b)));
  if (bias.defined()) {
    const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
    const void* bias_ptr = bias.raw_data();
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue,
                                                sizeof(epilogue)));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias_ptr,
                                                sizeof(bias_ptr)));
  }
  make_layout(&d.a, type, ob.rows, ob.cols, ob.ld, batch, ob.batch_stride);
  make_layout(&d.b, type, oa.rows, oa.cols, oa.ld, batch, oa.batch_stride);
  make_layout(&d.c, type, M, N, N, batch, M * N);

  void* workspace = workspace_for(stream);
  // out = op(a)·op(b) (+ bias) with `algo`: the call itself, and each measured candidate.
  const float alpha = 1.0f, beta = 0.0f;
  const auto run = [&](const cublasLtMatmulAlgo_t& algo) {
    return cublasLtMatmul(handle, d.op, &alpha, ob.tensor.raw_data(), d.a, oa.tensor.raw_data(),
                          d.b, &beta, out.raw_data(), d.c, out.raw_data(), d.c, &algo, workspace,
                          kWorkspaceBytes, stream.handle());
  };
  // Alignment of the pointers changes which kernels are legal.
  const int64_t alignment = (reinterpret_cast<uintptr_t>(oa.tensor.raw_data()) % 16 == 0) +
                            2 * (reinterpret_cast<uintptr_t>(ob.tensor.raw_data()) % 16 == 0) +
                            4 * (reinterpret_cast<uintptr_t>(out.raw_data()) % 16 == 0);
  cublasLtMatmulAlgo_t algorithm;
  if (mode == GemmMode::batch_invariant) {
    // No M, and for a transposed a no ld that follows M: a's stored layout is in the key only
    // through what does not change with the row count.
    const ShapeKey key{device.index,
                       static_cast<int>(out.dtype()),
                       ob.transposed,
                       oa.transposed,
                       -1,
                       N,
                       K,
                       batch,
                       oa.transposed ? -1 : oa.ld,
                       ob.ld,
                       oa.batch_stride == 0 ? 0 : -1,
                       ob.batch_stride,
                       alignment,
                       bias.defined(),
                       tf32,
                       false};
    std::lock_guard<std::mutex> lock(g_cache_mutex);
    auto it = g_invariant_plans.find(key);
    if (it == g_invariant_plans.end()) {
      const cublasLtMatmulAlgo_t chosen =
          choose_invariant_algorithm(handle, d.op, type, oa, ob, out, bias, M, N, K, batch);
      it = g_invariant_plans.emplace(key, InvariantPlan{chosen, {}}).first;
    }
    if (!it->second.checked_m.count(M)) {
      const Layouts real(type, oa, ob, M, M, N, batch);
      MICROLLM_CHECK(algo_fits(handle, d.op, real, it->second.algorithm), "cuda gemm",
                     "the batch-invariant algorithm for N=", N, " K=", K, " batch=", batch,
                     " dtype ", out.dtype(), " does not run M=", M);
      it->second.checked_m.insert(M);
    }
    algorithm = it->second.algorithm;
  } else {
    const bool measure = gemm_measured_plans() && alignment == 7 && !is_capturing(stream) &&
                         2.0 * static_cast<double>(M) * N * K * batch >= kMeasuredMinFlops;
    const ShapeKey key{device.index,
                       static_cast<int>(out.dtype()),
                       ob.transposed,
                       oa.transposed,
                       M,
                       N,
                       K,
                       batch,
                       oa.ld,
                       ob.ld,
                       oa.batch_stride,
                       ob.batch_stride,
                       alignment & 3,
                       bias.defined(),
                       tf32,
                       measure};
    std::lock_guard<std::mutex> lock(g_cache_mutex);
    auto it = g_algorithms.find(key);
    if (it != g_algorithms.end()) {
      algorithm = it->second;
    } else {
      CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&d.preference));
      const uint64_t ws = kWorkspaceBytes;
      CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
          d.preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
      cublasLtMatmulHeuristicResult_t results[kMeasuredCandidates] = {};
      int found = 0;
      CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(handle, d.op, d.a, d.b, d.c, d.c, d.preference,
                                                  measure ? kMeasuredCandidates : 1, results,
                                                  &found));
      MICROLLM_CHECK(found > 0, "cuda gemm", "cuBLASLt found no algorithm for M=", M, " N=", N,
                     " K=", K, " batch=", batch, " dtype ", out.dtype());
      algorithm = results[0].algo;
      if (measure) {
        algorithm = choose_measured_algorithm(results, found, run, out, stream);
        ++g_measured_plans_made;
        if (std::memcmp(&algorithm, &results[0].algo, sizeof(algorithm)) != 0)
          ++g_measured_plans_not_first;
      }
      g_algorithms.emplace(key, algorithm);
    }
  }
  CUBLAS_CHECK(run(algorithm));
}

}  // namespace microllm::cuda
