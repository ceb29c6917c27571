// matmul on CUDA: the GEMM problem handed to cuBLASLt (src/cuda/gemm.cpp).
#include "matmul_kernels.h"
#include "microllm/cuda/gemm.h"

namespace microllm::ops {

void gemm_cuda(const GemmProblem& p, const Tensor& a, const Tensor& b, const Tensor& bias,
               const Tensor& out) {
  cuda::gemm(a, p.trans_a, b, p.trans_b, bias, out);
}

}  // namespace microllm::ops
