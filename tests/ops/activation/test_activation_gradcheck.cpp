// Finite-difference gradient checks (F64, tests/support/gradcheck.h) of silu and swiglu,
// also with a transposed gate.
#include <gtest/gtest.h>

#include "microllm/ops/ops.h"
#include "support/gradcheck.h"

using namespace microllm;
using microllm::testing::gradcheck;
using microllm::testing::random_leaf;

TEST(GradcheckLayers, SiluSwiglu) {
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& in) { return ops::silu(in[0]); },
                        {random_leaf({3, 4}, 9, 0.0, 3.0)}));
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& in) { return ops::swiglu(in[0], in[1]); },
                        {random_leaf({2, 5}, 10, 0.0, 3.0), random_leaf({2, 5}, 11)}));
  EXPECT_TRUE(gradcheck(
      [](const std::vector<Tensor>& in) { return ops::swiglu(in[0].transpose(0, 1), in[1]); },
      {random_leaf({5, 2}, 12), random_leaf({2, 5}, 13)}));
}
