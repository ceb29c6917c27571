// GEMM on CUDA through cuBLASLt: F32 (TF32 off unless allowed), BF16 and F16 inputs with F32
// accumulation, optional bias epilogue, transposes without copies, strided batches, a
// workspace per stream and a per-shape cache of the algorithm cuBLASLt's heuristic picks.
#pragma once

#include <cstdint>

#include "microllm/core/tensor.h"

namespace microllm::cuda {

// TF32 tensor cores for F32 GEMMs (off by default: F32 results then match the CPU at F32
// tolerance). Process-wide.
void set_allow_tf32(bool allow);
bool allow_tf32();

// out[i] = op(a[i]) · op(b[i]) (+ bias) for i < batch, row-major.
// a: (batch_a, rows, cols) with batch_a 1 (shared) or batch; same for b.
// out: dense (batch, M, N), same dtype as a and b. bias: (N) or undefined, out's dtype.
void gemm(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, const Tensor& bias,
          const Tensor& out);

// Number of distinct GEMM shapes whose algorithm is cached (for tests and reports).
int64_t gemm_algorithm_cache_size();

}  // namespace microllm::cuda
