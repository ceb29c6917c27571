// Dtype dispatch to the element types the CUDA kernels are instantiated for (host code): the
// CUDA side of Tensor itself and the operators' kernels share it.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "microllm/core/error.h"
#include "microllm/core/tensor.h"

namespace microllm::cuda {

// Calls fn(T{}) with T = float, __nv_bfloat16 or __half; other dtypes are an Error naming op.
template <class Fn>
void dispatch_cuda_float(DType dtype, const char* op, Fn&& fn) {
  switch (dtype) {
    case DType::F32:
      fn(float{});
      return;
    case DType::BF16:
      fn(__nv_bfloat16{});
      return;
    case DType::F16:
      fn(__half{});
      return;
    default:
      MICROLLM_FAIL(op, "CUDA kernels take f32, bf16 or f16, found ", dtype);
  }
}

// Calls fn(I{}) with I = int32_t or int64_t, the element type of the index tensor `t`; other
// dtypes are an Error naming op and the argument (`name`).
template <class Fn>
void dispatch_cuda_index(const Tensor& t, const char* op, const char* name, Fn&& fn) {
  switch (t.dtype()) {
    case DType::I32:
      fn(int32_t{});
      return;
    case DType::I64:
      fn(int64_t{});
      return;
    default:
      MICROLLM_FAIL(op, name, " must be i32 or i64, found ", t.describe());
  }
}

}  // namespace microllm::cuda
