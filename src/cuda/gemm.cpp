// cuBLASLt GEMM (see include/microllm/cuda/gemm.h).
//
// Row-major C (M, N) = op(A)·op(B) is computed as the column-major product
// Cᵀ (N, M) = op(B)ᵀ·op(A)ᵀ: the B buffer is cuBLASLt's "A", the A buffer its "B", and
// a row-major matrix with row stride ld is a column-major matrix of swapped dimensions with
// the same ld. The bias epilogue adds one value per row of Cᵀ, i.e. per output feature N.
#include "microllm/cuda/gemm.h"

#include <atomic>
#include <map>
#include <mutex>
#include <tuple>

#include "microllm/cuda/allocator.h"
#include "microllm/cuda/check.h"
#include "microllm/cuda/runtime.h"

namespace microllm::cuda {
namespace {

constexpr size_t kWorkspaceBytes = 32ull << 20;  // cuBLAS' recommendation for Hopper

std::atomic<bool> g_allow_tf32{false};

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
  if ((s_col == 1 || cols == 1) && s_row >= std::max<int64_t>(cols, 1))
    return {t, trans, rows, cols, s_row, batch_stride};
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

// One workspace per stream: two streams must never share one.
void* workspace_for(Device device, cudaStream_t stream) {
  static std::mutex mutex;
  static std::map<std::pair<int, cudaStream_t>, void*> workspaces;
  std::lock_guard<std::mutex> lock(mutex);
  void*& ws = workspaces[{device.index, stream}];
  if (!ws) ws = allocate(kWorkspaceBytes, device);
  return ws;
}

// Everything that decides the algorithm choice.
using ShapeKey = std::tuple<int, int, bool, bool, int64_t, int64_t, int64_t, int64_t, int64_t,
                            int64_t, int64_t, int64_t, int64_t, bool, bool>;
std::mutex g_cache_mutex;
std::map<ShapeKey, cublasLtMatmulAlgo_t> g_algorithms;

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

}  // namespace

void set_allow_tf32(bool allow) { g_allow_tf32 = allow; }
bool allow_tf32() { return g_allow_tf32; }

int64_t gemm_algorithm_cache_size() {
  std::lock_guard<std::mutex> lock(g_cache_mutex);
  return static_cast<int64_t>(g_algorithms.size());
}

void gemm(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, const Tensor& bias,
          const Tensor& out) {
  const Device device = out.device();
  const int64_t batch = out.shape()[0], M = out.shape()[1], N = out.shape()[2];
  const Operand oa = make_operand(a, trans_a);
  const Operand ob = make_operand(b, trans_b);
  const int64_t K = oa.transposed ? oa.rows : oa.cols;
  const cudaDataType_t type = cuda_type(out.dtype());
  const bool tf32 = out.dtype() == DType::F32 && allow_tf32();
  const cublasComputeType_t compute = tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  const cudaStream_t stream = current_stream_handle(device);

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

  void* workspace = workspace_for(device, stream);
  const ShapeKey key{device.index, static_cast<int>(out.dtype()), ob.transposed, oa.transposed, M,
                     N, K, batch, oa.ld, ob.ld, oa.batch_stride, ob.batch_stride,
                     // Alignment of the pointers changes which kernels are legal.
                     (reinterpret_cast<uintptr_t>(oa.tensor.raw_data()) % 16 == 0) +
                         2 * (reinterpret_cast<uintptr_t>(ob.tensor.raw_data()) % 16 == 0),
                     bias.defined(), tf32};
  cublasLtMatmulAlgo_t algorithm;
  {
    std::lock_guard<std::mutex> lock(g_cache_mutex);
    auto it = g_algorithms.find(key);
    if (it != g_algorithms.end()) {
      algorithm = it->second;
    } else {
      CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&d.preference));
      const uint64_t ws = kWorkspaceBytes;
      CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
          d.preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
      cublasLtMatmulHeuristicResult_t result{};
      int found = 0;
      CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(lt_handle(device.index), d.op, d.a, d.b, d.c, d.c,
                                                  d.preference, 1, &result, &found));
      MICROLLM_CHECK(found > 0, "cuda gemm", "cuBLASLt found no algorithm for M=", M, " N=", N,
                     " K=", K, " batch=", batch, " dtype ", out.dtype());
      algorithm = result.algo;
      g_algorithms.emplace(key, algorithm);
    }
  }
  const float alpha = 1.0f, beta = 0.0f;
  CUBLAS_CHECK(cublasLtMatmul(lt_handle(device.index), d.op, &alpha, ob.tensor.raw_data(), d.a,
                              oa.tensor.raw_data(), d.b, &beta, out.raw_data(), d.c, out.raw_data(),
                              d.c, &algorithm, workspace, kWorkspaceBytes, stream));
}

}  // namespace microllm::cuda
