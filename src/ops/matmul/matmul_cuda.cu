// matmul on CUDA: the GEMM problem handed to cuBLASLt (src/cuda/gemm.cpp), in the plan mode
// of the calling thread.
#include "matmul_kernels.h"
#include "microllm/cuda/gemm.h"
#include "microllm/ops/gemm_mode.h"

namespace microllm::ops {

void gemm_cuda(const GemmProblem& p, const Tensor& a, const Tensor& b, const Tensor& bias,
               const Tensor& out) {
  const cuda::GemmMode mode = gemm_mode() == GemmMode::batch_invariant
                                  ? cuda::GemmMode::batch_invariant
                                  : cuda::GemmMode::fast;
  cuda::gemm(a, p.trans_a, b, p.trans_b, bias, out, mode);
}

}  // namespace microllm::ops
