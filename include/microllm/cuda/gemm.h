// GEMM on CUDA through cuBLASLt: F32 (TF32 off unless allowed), BF16 and F16 inputs with F32
// accumulation, optional bias epilogue, transposes without copies, strided batches, a
// workspace per stream and a cache of the algorithm cuBLASLt's heuristic picks: per exact
// shape (GemmMode::fast), or per shape without M (GemmMode::batch_invariant).
#pragma once

#include <cstdint>

#include "microllm/core/tensor.h"
#include "microllm/cuda/runtime.h"

namespace microllm::cuda {

// TF32 tensor cores for F32 GEMMs (off by default: F32 results then match the CPU at F32
// tolerance). Process-wide.
void set_allow_tf32(bool allow);
bool allow_tf32();

// Measured plans for GemmMode::fast (src/cuda/gemm.cpp): for a problem of at least 2 GFLOP,
// the fastest of cuBLASLt's candidates that write the heuristic's first candidate's bits,
// chosen once on the first call. On by default; off with MICROLLM_GEMM_MEASURE=0 (read at
// first use) or set_gemm_measured_plans(false). Either setting gives the same bits.
// Process-wide; plans already made stay.
void set_gemm_measured_plans(bool on);
bool gemm_measured_plans();

struct GemmMeasuredPlanCounts {
  int64_t made = 0;       // plans chosen by measurement
  int64_t not_first = 0;  // of them, plans that are not the heuristic's first candidate
};
GemmMeasuredPlanCounts gemm_measured_plan_counts();

// How one call's algorithm is chosen. ops pass the calling thread's ops::GemmMode
// (microllm/ops/gemm_mode.h), which is where training and inference set their policy.
enum class GemmMode {
  fast,  // the heuristic's pick (or the measured plan) for the exact (M, N, K, ...) problem;
         // split-K allowed
  // One algorithm per (N, K, batch, dtype, transposes, leading dims, alignment, bias, TF32),
  // chosen for M = 256 with no split-K and no reduction scheme, used for every M: row r of
  // out does not depend on M (holds for a read untransposed, as linear reads activations).
  batch_invariant,
};

// out[i] = op(a[i]) · op(b[i]) (+ bias) for i < batch, row-major.
// a: (batch_a, rows, cols) with batch_a 1 (shared) or batch; same for b.
// out: dense (batch, M, N), same dtype as a and b. bias: (N) or undefined, out's dtype.
void gemm(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, const Tensor& bias,
          const Tensor& out, GemmMode mode = GemmMode::fast);

// Makes the stream's cuBLASLt workspace (32 MiB, kept for the process) now, so a GEMM
// captured into a CUDA graph later allocates nothing. CudaGraph::capture calls it.
void reserve_gemm_workspace(const Stream& stream);

// Number of distinct GEMM shapes whose algorithm is cached (GemmMode::fast), and of
// batch-invariant plans (for tests and reports).
int64_t gemm_algorithm_cache_size();
int64_t gemm_invariant_plan_count();

}  // namespace microllm::cuda
