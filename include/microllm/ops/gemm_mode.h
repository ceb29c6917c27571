// Which GEMM plan matmul / linear use on this thread: the fast default, or a batch-invariant
// plan in which row r of a product never depends on how many rows share the GEMM.
//
// Training and the reference model run in GemmMode::fast (OpenBLAS on the CPU, cuBLASLt's
// per-shape heuristic on CUDA, split-K allowed). The inference engine runs its steps in
// GemmMode::batch_invariant, so a request's tokens are bit-identical whether it is decoded
// alone or in a batch, and a cached prefix gives the same values as a full prefill
// (INFERENCE.md): on CUDA one cuBLASLt algorithm per (N, K, dtype, layout, epilogue) chosen
// for a fixed representative M and without split-K; on the CPU a fixed-order kernel in
// which every output element is computed by the same instructions (OpenBLAS's sgemm changes
// kernels and thread partitions with M, so its rows differ between M = 1 and M = 64).
//
// The mode is per thread, so an engine thread and a training thread never see each other's
// setting; GemmModeGuard sets it for a scope.
#pragma once

namespace microllm::ops {

enum class GemmMode {
  fast,             // default: the fastest plan for each exact shape
  batch_invariant,  // plans independent of M (rows of the output)
};

GemmMode gemm_mode();
void set_gemm_mode(GemmMode mode);

class GemmModeGuard {
 public:
  explicit GemmModeGuard(GemmMode mode) : previous_(gemm_mode()) { set_gemm_mode(mode); }
  ~GemmModeGuard() { set_gemm_mode(previous_); }
  GemmModeGuard(const GemmModeGuard&) = delete;
  GemmModeGuard& operator=(const GemmModeGuard&) = delete;

 private:
  GemmMode previous_;
};

}  // namespace microllm::ops
