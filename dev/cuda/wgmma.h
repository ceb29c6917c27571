// The lab's wgmma programs use the library's header-only Hopper helpers, so a kernel moves
// between the lab and src/ops/attention without a second copy of them.
#pragma once

#include "../../src/ops/attention/wgmma.cuh"

namespace lab {
using namespace microllm::ops::wgmma;
}  // namespace lab
