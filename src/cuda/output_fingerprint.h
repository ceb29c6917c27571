// A fingerprint of a device buffer's bits, for telling whether two kernels wrote the same
// output (the GEMM's measured plans, src/cuda/gemm.cpp).
#pragma once

#include <cstdint>

#include "microllm/core/tensor.h"

namespace microllm::cuda {

struct OutputFingerprint {
  uint64_t hash = 0;  // Σ over the 2-byte units u_i of splitmix64((i << 16) | u_i), mod 2⁶⁴
  int64_t nonzero_units = 0;  // units that are not 0x0000 (+0 in F16 and BF16)
  bool operator==(const OutputFingerprint&) const = default;
};

// The fingerprint of a dense CUDA tensor of 2- or 4-byte elements, computed on the device's
// current stream; the host waits for it (counted as a synchronization). The sum is of
// integers, so it is the same in any order.
OutputFingerprint output_fingerprint(const Tensor& t);

}  // namespace microllm::cuda
