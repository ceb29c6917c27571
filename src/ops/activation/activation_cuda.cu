// CUDA SiLU and SwiGLU, forward and backward. F32/BF16/F16 storage, F32 arithmetic; the CPU
// reference is activation_cpu.cpp.
//   silu(x) = x·σ(x);  silu'(x) = σ(x)·(1 + x·(1 − σ(x)))
//   swiglu(gate, up) = silu(gate)·up;  dgate = dy·up·silu'(gate);  dup = dy·gate·σ(gate)
//
// Layout: every operand dense, all of one size n, treated as flat arrays. These kernels are
// bandwidth-bound, so when every pointer is 16-byte aligned each thread moves 16 bytes per
// operand (4 floats or 8 bf16) and a scalar loop finishes the tail; otherwise the scalar
// loop does everything.
#include <cmath>

#include "../cuda_common.cuh"
#include "activation_kernels.h"

namespace microllm::ops {
namespace {

using namespace cuda_detail;

// The four kernels share one body; kOp picks the arithmetic and the operand counts.
enum ActivationOp : int { kSiluForward, kSiluBackward, kSwigluForward, kSwigluBackward };

// Inputs read: silu forward (x); silu backward (x, dy); swiglu forward (gate, up);
// swiglu backward (gate, up, dy). Outputs written: two for swiglu backward, else one.
template <int kOp>
constexpr int kInputs = kOp == kSiluForward ? 1 : (kOp == kSwigluBackward ? 3 : 2);
template <int kOp>
constexpr int kOutputs = kOp == kSwigluBackward ? 2 : 1;

// 1/(1 + e^−x) in F32: e^−x overflows to inf for x < −88 and the quotient is then 0, so large
// |x| gives 0 or 1, never NaN.
__device__ __forceinline__ float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

// One element: inputs a, b, c (as listed above) → out0 (and out1). The products are grouped
// as in the CPU reference.
template <int kOp>
__device__ __forceinline__ void apply_activation(float a, float b, float c, float& out0,
                                                 float& out1) {
  const float s = sigmoid(a);
  if constexpr (kOp == kSiluForward) {
    out0 = a * s;
  } else if constexpr (kOp == kSiluBackward) {
    out0 = b * (s * (1.0f + a * (1.0f - s)));
  } else if constexpr (kOp == kSwigluForward) {
    out0 = a * s * b;
  } else {
    out0 = c * b * (s * (1.0f + a * (1.0f - s)));
    out1 = c * a * s;
  }
}

// a, b, c, out0, out1 (n); operands the op does not use may be null. `vec`: every used
// pointer is 16-byte aligned.
template <class T, int kOp>
__global__ void activation_kernel(const T* a, const T* b, const T* c, T* out0, T* out1, int64_t n,
                                  bool vec) {
  constexpr int W = kVec<T>;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t start = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t vectors = vec ? n / W : 0;
  for (int64_t i = start; i < vectors; i += stride) {
    Vec16<T> va{}, vb{}, vc{}, vo0, vo1;
    va = reinterpret_cast<const Vec16<T>*>(a)[i];
    if constexpr (kInputs<kOp> >= 2) vb = reinterpret_cast<const Vec16<T>*>(b)[i];
    if constexpr (kInputs<kOp> >= 3) vc = reinterpret_cast<const Vec16<T>*>(c)[i];
#pragma unroll
    for (int j = 0; j < W; ++j) {
      float o0 = 0.0f, o1 = 0.0f;
      apply_activation<kOp>(to_float(va.v[j]), to_float(vb.v[j]), to_float(vc.v[j]), o0, o1);
      vo0.v[j] = from_float<T>(o0);
      vo1.v[j] = from_float<T>(o1);
    }
    reinterpret_cast<Vec16<T>*>(out0)[i] = vo0;
    if constexpr (kOutputs<kOp> == 2) reinterpret_cast<Vec16<T>*>(out1)[i] = vo1;
  }
  // The elements after the last whole vector (all of them without the vector path).
  for (int64_t i = vectors * W + start; i < n; i += stride) {
    const float va = to_float(a[i]);
    const float vb = kInputs<kOp> >= 2 ? to_float(b[i]) : 0.0f;
    const float vc = kInputs<kOp> >= 3 ? to_float(c[i]) : 0.0f;
    float o0 = 0.0f, o1 = 0.0f;
    apply_activation<kOp>(va, vb, vc, o0, o1);
    out0[i] = from_float<T>(o0);
    if constexpr (kOutputs<kOp> == 2) out1[i] = from_float<T>(o1);
  }
}

const void* data_or_null(const Tensor& t) { return t.defined() ? t.raw_data() : nullptr; }

// Runs activation_kernel<T, kOp> over out0's elements; undefined tensors stand for operands
// the op does not use. `op` names the operator in errors, `kernel` the launch.
template <int kOp>
void launch_activation(const char* op, const char* kernel, const Tensor& a, const Tensor& b,
                       const Tensor& c, const Tensor& out0, const Tensor& out1) {
  const int64_t n = out0.numel();
  if (n == 0) return;
  constexpr int kThreads = 256;
  dispatch_cuda_float(out0.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    const bool vec = aligned16({data_or_null(a), data_or_null(b), data_or_null(c),
                                data_or_null(out0), data_or_null(out1)});
    const unsigned grid = grid_for(vec ? ceil_div(n, kVec<T>) : n, kThreads);
    activation_kernel<T, kOp><<<grid, kThreads, 0, stream_of(out0)>>>(
        static_cast<const T*>(data_or_null(a)), static_cast<const T*>(data_or_null(b)),
        static_cast<const T*>(data_or_null(c)), ptr<T>(out0),
        out1.defined() ? ptr<T>(out1) : nullptr, n, vec);
    CUDA_CHECK_LAUNCH(kernel);
  });
}

}  // namespace

void silu_forward_cuda(const Tensor& x, const Tensor& y) {
  launch_activation<kSiluForward>("silu", "silu_forward_kernel", x, Tensor(), Tensor(), y,
                                  Tensor());
}

void silu_backward_cuda(const Tensor& x, const Tensor& dy, const Tensor& dx) {
  launch_activation<kSiluBackward>("silu", "silu_backward_kernel", x, dy, Tensor(), dx, Tensor());
}

void swiglu_forward_cuda(const Tensor& gate, const Tensor& up, const Tensor& y) {
  launch_activation<kSwigluForward>("swiglu", "swiglu_forward_kernel", gate, up, Tensor(), y,
                                    Tensor());
}

void swiglu_backward_cuda(const Tensor& gate, const Tensor& up, const Tensor& dy,
                          const Tensor& dgate, const Tensor& dup) {
  launch_activation<kSwigluBackward>("swiglu", "swiglu_backward_kernel", gate, up, dy, dgate, dup);
}

}  // namespace microllm::ops
