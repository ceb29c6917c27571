// Finite-difference gradient check (F64, tests/support/gradcheck.h) of embedding with
// repeated ids and a row never picked.
#include <gtest/gtest.h>

#include "microllm/ops/ops.h"
#include "ops/op_test_util.h"
#include "support/gradcheck.h"

using namespace microllm;
using microllm::testing::gradcheck;
using microllm::testing::random_leaf;
using microllm::testing::optest::ids;

TEST(GradcheckLayers, EmbeddingRepeatedIds) {
  // Row 1 is picked three times, row 2 never: its gradient must be zero.
  const Tensor token_ids = ids({1, 3, 1, 1, 0, 4}, {2, 3});
  EXPECT_TRUE(
      gradcheck([=](const std::vector<Tensor>& in) { return ops::embedding(in[0], token_ids); },
                {random_leaf({5, 3}, 17)}));
}
