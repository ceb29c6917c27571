// Numerically stable softmax and log-softmax along one dimension (max subtracted first).
#pragma once

#include "microllm/core/tensor.h"

namespace microllm::ops {

Tensor softmax(const Tensor& x, int64_t dim = -1);
Tensor log_softmax(const Tensor& x, int64_t dim = -1);

}  // namespace microllm::ops
