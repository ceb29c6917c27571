// CUDA SiLU and SwiGLU, forward and backward. F32/BF16/F16 storage, F32 arithmetic; the CPU
// reference is activation_cpu.cpp.
//   silu(x) = x·σ(x);  silu'(x) = σ(x)·(1 + x·(1 − σ(x)))
//   swiglu(gate, up) = silu(gate)·up;  dgate = dy·up·silu'(gate);  dup = dy·gate·σ(gate)
//
// Layout: every operand of one size n; silu's dense, treated as flat arrays; swiglu's dense or
// column blocks of wider matrices (RowLayout: the halves of a joined gate/up projection are
// read, and their gradients written, in place), all (rows, cols), each with its own stride
// between rows. These kernels are bandwidth-bound, so when every pointer is 16-byte aligned
// (and with row strides, cols and the strides are whole 16-byte vectors) each thread moves 16
// bytes per operand (4 floats or 8 bf16) and a scalar loop finishes the tail; otherwise the
// scalar loop does everything.
#include <cmath>

#include "../common.h"
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

// Elements between rows of each operand (RowLayout::ld), with kRows.
struct RowStrides {
  int64_t a, b, c, out0, out1;
};

// a, b, c, out0, out1 (n) — with kRows (n / cols, cols), row strides ld —; operands the op
// does not use may be null. `vec`: every used pointer is 16-byte aligned (with kRows, cols and
// the row strides are multiples of kVec<T>).
template <class T, int kOp, bool kRows>
__global__ void activation_kernel(const T* a, const T* b, const T* c, T* out0, T* out1, int64_t n,
                                  bool vec, int64_t cols, RowStrides ld) {
  constexpr int W = kVec<T>;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t start = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t vectors = vec ? n / W : 0;
  // Element e of an operand whose rows are `row_stride` apart.
  auto at = [&](int64_t e, int64_t row_stride) {
    if constexpr (!kRows) return e;
    const int64_t row = e / cols;
    return row * row_stride + (e - row * cols);
  };
  for (int64_t i = start; i < vectors; i += stride) {
    const int64_t e = i * W;
    Vec16<T> va{}, vb{}, vc{}, vo0, vo1;
    va = *reinterpret_cast<const Vec16<T>*>(a + at(e, ld.a));
    if constexpr (kInputs<kOp> >= 2) vb = *reinterpret_cast<const Vec16<T>*>(b + at(e, ld.b));
    if constexpr (kInputs<kOp> >= 3) vc = *reinterpret_cast<const Vec16<T>*>(c + at(e, ld.c));
#pragma unroll
    for (int j = 0; j < W; ++j) {
      float o0 = 0.0f, o1 = 0.0f;
      apply_activation<kOp>(to_float(va.v[j]), to_float(vb.v[j]), to_float(vc.v[j]), o0, o1);
      vo0.v[j] = from_float<T>(o0);
      vo1.v[j] = from_float<T>(o1);
    }
    *reinterpret_cast<Vec16<T>*>(out0 + at(e, ld.out0)) = vo0;
    if constexpr (kOutputs<kOp> == 2) *reinterpret_cast<Vec16<T>*>(out1 + at(e, ld.out1)) = vo1;
  }
  // The elements after the last whole vector (all of them without the vector path).
  for (int64_t i = vectors * W + start; i < n; i += stride) {
    const float va = to_float(a[at(i, ld.a)]);
    const float vb = kInputs<kOp> >= 2 ? to_float(b[at(i, ld.b)]) : 0.0f;
    const float vc = kInputs<kOp> >= 3 ? to_float(c[at(i, ld.c)]) : 0.0f;
    float o0 = 0.0f, o1 = 0.0f;
    apply_activation<kOp>(va, vb, vc, o0, o1);
    out0[at(i, ld.out0)] = from_float<T>(o0);
    if constexpr (kOutputs<kOp> == 2) out1[at(i, ld.out1)] = from_float<T>(o1);
  }
}

const void* data_or_null(const Tensor& t) { return t.defined() ? t.raw_data() : nullptr; }

// The stride between rows of t (RowLayout, checked by the operator); `cols` for an operand
// the op does not use.
int64_t row_stride(const Tensor& t, int64_t cols) {
  detail::RowLayout layout{};
  return t.defined() && detail::row_layout(t, layout) ? layout.ld : cols;
}

// Runs activation_kernel<T, kOp> over out0's elements; undefined tensors stand for operands
// the op does not use. `op` names the operator in errors, `kernel` the launch.
template <int kOp>
void launch_activation(const char* op, const char* kernel, const Tensor& a, const Tensor& b,
                       const Tensor& c, const Tensor& out0, const Tensor& out1) {
  const int64_t n = out0.numel();
  if (n == 0) return;
  constexpr int kThreads = 256;
  const int64_t cols = out0.dim() == 0 ? 1 : out0.size(out0.dim() - 1);
  const RowStrides ld{row_stride(a, cols), row_stride(b, cols), row_stride(c, cols),
                      row_stride(out0, cols), row_stride(out1, cols)};
  const bool rows = ld.a != cols || ld.b != cols || ld.c != cols || ld.out0 != cols ||
                    ld.out1 != cols;  // else every operand is dense: flat arrays
  dispatch_cuda_float(out0.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    const bool whole =
        !rows || (cols % kVec<T> == 0 && ld.a % kVec<T> == 0 && ld.b % kVec<T> == 0 &&
                  ld.c % kVec<T> == 0 && ld.out0 % kVec<T> == 0 && ld.out1 % kVec<T> == 0);
    const bool vec = whole && aligned16({data_or_null(a), data_or_null(b), data_or_null(c),
                                         data_or_null(out0), data_or_null(out1)});
    const unsigned grid = grid_for(vec ? ceil_div(n, kVec<T>) : n, kThreads);
    const auto launch = [&](auto kernel_function) {
      kernel_function<<<grid, kThreads, 0, stream_of(out0)>>>(
          static_cast<const T*>(data_or_null(a)), static_cast<const T*>(data_or_null(b)),
          static_cast<const T*>(data_or_null(c)), ptr<T>(out0),
          out1.defined() ? ptr<T>(out1) : nullptr, n, vec, cols, ld);
    };
    if (rows)
      launch(activation_kernel<T, kOp, true>);
    else
      launch(activation_kernel<T, kOp, false>);
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
