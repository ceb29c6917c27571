// A hint a decode kernel carries for the kernels after it: while it runs, the L2 cache fetches
// the bytes of up to two dense tensors (weights that no kernel of the step writes), so a later
// kernel reads them from L2 instead of DRAM. A batch-1 decode layer has latency-bound kernels
// (the QKV and O projections, attention) next to bandwidth-bound ones (gate/up, down); the
// former can keep DRAM busy with the latter's weights. The hint changes no value; the CPU
// ignores it.
#pragma once

#include <array>
#include <cstdint>

#include "microllm/core/tensor.h"

namespace microllm::ops {

struct L2Prefetch {
  std::array<Tensor, 2> parts;  // dense tensors on the kernel's device; undefined: none
  bool empty() const { return !parts[0].defined() && !parts[1].defined(); }
};

// The L2 cache size of `device` in bytes (0 on the CPU), for callers that size their hints.
int64_t l2_cache_bytes(Device device);

namespace detail {
// Throws unless every defined part is a dense tensor on `device`.
void check_l2_prefetch(const char* op, const L2Prefetch& prefetch, Device device);
}  // namespace detail

}  // namespace microllm::ops
