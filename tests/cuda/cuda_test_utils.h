// Helpers for the CUDA test suite (label `cuda`): skipping without a GPU, and comparing an
// operator's CUDA forward and backward with the CPU reference.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "microllm/core/tensor.h"
#include "microllm/cuda/runtime.h"

namespace microllm::testing {

// Skips the current test, printing why, when no CUDA device is usable.
#define MICROLLM_REQUIRE_CUDA()                                                        \
  do {                                                                                 \
    if (!::microllm::cuda::is_available())                                             \
      GTEST_SKIP() << "CUDA test skipped: " << ::microllm::cuda::unavailable_reason(); \
  } while (0)

// ‖a − b‖₂ / ‖b‖₂ over all elements (b the reference); 0 when both are zero.
double relative_l2(const Tensor& a, const Tensor& b);
// Max over elements of |a − b| / (atol + rtol·|b|) — ≤ 1 means within tolerance.
double tolerance_ratio(const Tensor& a, const Tensor& b, double atol, double rtol);

struct CudaCheckOptions {
  DType dtype = DType::F32;  // dtype the CUDA side runs in (inputs cast after rounding)
  double atol = 5e-5;        // F32: SPEC §6 CUDA tolerance (CPU 1e-5 × 5)
  double rtol = 5e-5;
  double bf16_rel_l2 = 1e-2;  // BF16/F16: relative L2 bound
  bool check_backward = true;
  uint64_t seed = 7;
};

using OpFn = std::function<Tensor(const std::vector<Tensor>&)>;

// Runs `fn` on CPU F32 inputs and on their CUDA copies in options.dtype, with the same
// random output gradient, and checks the forward outputs and every input gradient agree.
// Floating inputs that require grad in `inputs` get gradients compared. Inputs that are
// not floating (ids, positions) are moved to the device unchanged. Before comparing, the
// CPU inputs are rounded through options.dtype, so both sides see the same values.
::testing::AssertionResult cuda_matches_cpu(const OpFn& fn, const std::vector<Tensor>& inputs,
                                            const CudaCheckOptions& options = {});

// Same dtype, shape and bytes (on any devices); the first differing element otherwise.
::testing::AssertionResult bit_equal(const Tensor& got, const Tensor& want);

// A CPU F32 leaf of N(mean, std²) samples that requires a gradient.
Tensor cuda_test_leaf(const Shape& shape, uint64_t seed, double mean = 0.0, double std = 1.0);
// Default options with the CUDA side running in `dtype`.
CudaCheckOptions options_in(DType dtype);
// The dtypes every CUDA operator test covers.
inline constexpr DType kCudaTestDtypes[] = {DType::F32, DType::BF16};
// Every floating dtype a CUDA kernel is instantiated for, for the tests that cover F16 too.
inline constexpr DType kCudaFloatDtypes[] = {DType::F32, DType::BF16, DType::F16};

}  // namespace microllm::testing
