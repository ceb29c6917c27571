// The per-thread GEMM mode (see include/microllm/ops/gemm_mode.h).
#include "microllm/ops/gemm_mode.h"

namespace microllm::ops {
namespace {
thread_local GemmMode t_mode = GemmMode::fast;
}

GemmMode gemm_mode() { return t_mode; }
void set_gemm_mode(GemmMode mode) { t_mode = mode; }

}  // namespace microllm::ops
