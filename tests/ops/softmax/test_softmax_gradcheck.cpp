// Finite-difference gradient checks (F64, tests/support/gradcheck.h) of softmax and
// log_softmax along every dim and on a non-contiguous input.
#include <gtest/gtest.h>

#include "microllm/ops/ops.h"
#include "support/gradcheck.h"

using namespace microllm;
using microllm::testing::gradcheck;
using microllm::testing::random_leaf;

TEST(GradcheckLayers, SoftmaxAndLogSoftmaxAlongEveryDim) {
  const Tensor x = random_leaf({2, 3, 4}, 1);
  for (int64_t dim : {-1, 0, 1}) {
    SCOPED_TRACE("dim " + std::to_string(dim));
    EXPECT_TRUE(
        gradcheck([=](const std::vector<Tensor>& in) { return ops::softmax(in[0], dim); }, {x}));
    EXPECT_TRUE(gradcheck(
        [=](const std::vector<Tensor>& in) { return ops::log_softmax(in[0], dim); }, {x}));
  }
  // A non-contiguous input.
  EXPECT_TRUE(gradcheck(
      [](const std::vector<Tensor>& in) { return ops::softmax(in[0].transpose(0, 2), -1); }, {x}));
}
