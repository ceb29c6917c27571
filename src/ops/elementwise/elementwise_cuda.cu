// CUDA kernels of the elementwise operators. F32/BF16/F16 storage, F32 arithmetic.
//
// Dense operands of one shape take the vector path: each thread moves 16 bytes per operand
// (4 floats or 8 bf16) since these kernels are bandwidth-bound. Broadcast or strided
// operands take the indexed path, which maps each output index to both input offsets.
#include <cmath>

#include "../cuda_common.cuh"
#include "elementwise_kernels.h"

namespace microllm::ops {
namespace {

using namespace cuda_detail;

__device__ __forceinline__ float apply_binary(BinaryOp op, float a, float b) {
  switch (op) {
    case BinaryOp::Add:
      return a + b;
    case BinaryOp::Sub:
      return a - b;
    case BinaryOp::Mul:
      return a * b;
    case BinaryOp::Div:
      return a / b;
  }
  return 0.0f;
}

__device__ __forceinline__ float apply_unary(UnaryOp op, float p, float x) {
  switch (op) {
    case UnaryOp::Neg:
      return -x;
    case UnaryOp::Scale:
      return x * p;
    case UnaryOp::AddScalar:
      return x + p;
    case UnaryOp::Pow:
      return powf(x, p);
    case UnaryOp::Exp:
      return expf(x);
    case UnaryOp::Log:
      return logf(x);
    case UnaryOp::Sqrt:
      return sqrtf(x);
    case UnaryOp::Rsqrt:
      return rsqrtf(x);
  }
  return 0.0f;
}

template <class T>
__global__ void binary_dense_kernel(BinaryOp op, const T* a, const T* b, T* out, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t vectors = n / kVec<T>;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < vectors;
       i += stride) {
    const Vec16<T> va = reinterpret_cast<const Vec16<T>*>(a)[i];
    const Vec16<T> vb = reinterpret_cast<const Vec16<T>*>(b)[i];
    Vec16<T> vo;
#pragma unroll
    for (int j = 0; j < kVec<T>; ++j)
      vo.v[j] = from_float<T>(apply_binary(op, to_float(va.v[j]), to_float(vb.v[j])));
    reinterpret_cast<Vec16<T>*>(out)[i] = vo;
  }
  // The tail that does not fill a vector.
  for (int64_t i = vectors * kVec<T> + blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
       i < n; i += stride)
    out[i] = from_float<T>(apply_binary(op, to_float(a[i]), to_float(b[i])));
}

template <class T>
__global__ void binary_strided_kernel(BinaryOp op, const T* a, StridedIndexer a_ix, const T* b,
                                      StridedIndexer b_ix, T* out, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[i] =
        from_float<T>(apply_binary(op, to_float(a[a_ix.offset(i)]), to_float(b[b_ix.offset(i)])));
}

template <class T>
__global__ void unary_kernel(UnaryOp op, float param, const T* x, StridedIndexer x_ix, bool dense,
                             T* out, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[i] = from_float<T>(apply_unary(op, param, to_float(x[dense ? i : x_ix.offset(i)])));
}

}  // namespace

void binary_forward_cuda(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) {
  const int64_t n = out.numel();
  if (n == 0) return;
  constexpr int kThreads = 256;
  dispatch_cuda_float(out.dtype(), "elementwise", [&](auto tag) {
    using T = decltype(tag);
    const bool dense = a.is_contiguous() && b.is_contiguous() && a.shape() == b.shape() &&
                       aligned16({a.raw_data(), b.raw_data(), out.raw_data()});
    if (dense) {
      binary_dense_kernel<T>
          <<<grid_for(microllm::cuda::ceil_div(n, kVec<T>), kThreads), kThreads, 0,
             stream_of(out)>>>(op, ptr<const T>(a), ptr<const T>(b), ptr<T>(out), n);
    } else {
      binary_strided_kernel<T><<<grid_for(n, kThreads), kThreads, 0, stream_of(out)>>>(
          op, ptr<const T>(a), make_indexer(a, "elementwise"), ptr<const T>(b),
          make_indexer(b, "elementwise"), ptr<T>(out), n);
    }
    CUDA_CHECK_LAUNCH("binary elementwise kernel");
  });
}

void unary_forward_cuda(UnaryOp op, double param, const Tensor& x, const Tensor& out) {
  const int64_t n = out.numel();
  if (n == 0) return;
  constexpr int kThreads = 256;
  dispatch_cuda_float(out.dtype(), "elementwise", [&](auto tag) {
    using T = decltype(tag);
    unary_kernel<T><<<grid_for(n, kThreads), kThreads, 0, stream_of(out)>>>(
        op, static_cast<float>(param), ptr<const T>(x), make_indexer(x, "elementwise"),
        x.is_contiguous(), ptr<T>(out), n);
    CUDA_CHECK_LAUNCH("unary elementwise kernel");
  });
}

}  // namespace microllm::ops
