// Quick end-to-end checks that forward, views and backward connect.
#include <gtest/gtest.h>

#include "microllm/ops/ops.h"
#include "support/gradcheck.h"

using namespace microllm;
using microllm::testing::gradcheck;
using microllm::testing::random_leaf;

TEST(Smoke, MatmulGrad) {
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& in) { return ops::matmul(in[0], in[1]); },
                        {random_leaf({3, 4}, 1), random_leaf({4, 5}, 2)}));
}
TEST(Smoke, MatmulTransGrad) {
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb) {
      Tensor a = random_leaf(ta ? Shape{2, 4, 3} : Shape{2, 3, 4}, 1);
      Tensor b = random_leaf(tb ? Shape{5, 4} : Shape{4, 5}, 2);
      EXPECT_TRUE(gradcheck(
          [=](const std::vector<Tensor>& in) { return ops::matmul(in[0], in[1], ta, tb); },
          {a, b}));
    }
}
TEST(Smoke, AttentionGrad) {
  EXPECT_TRUE(gradcheck(
      [](const std::vector<Tensor>& in) { return ops::attention(in[0], in[1], in[2]); },
      {random_leaf({1, 4, 3, 2}, 1), random_leaf({1, 2, 3, 2}, 2), random_leaf({1, 2, 3, 2}, 3)}));
}
TEST(Smoke, ViewsGrad) {
  EXPECT_TRUE(gradcheck(
      [](const std::vector<Tensor>& in) {
        return ops::mul(in[0].transpose(0, 1).reshape({6, 2}).narrow(0, 1, 4),
                        in[1].expand({4, 2}));
      },
      {random_leaf({4, 3}, 1), random_leaf({1, 2}, 2)}));
}
TEST(Smoke, RmsNormSoftmaxCe) {
  Tensor targets = Tensor::from_vector(std::vector<int64_t>{1, -100, 3}, {3});
  EXPECT_TRUE(gradcheck(
      [=](const std::vector<Tensor>& in) {
        auto r = ops::add_rms_norm(in[0], in[1], in[2], 1e-6);
        return ops::add(ops::cross_entropy(ops::log_softmax(r.normed, -1), targets),
                        ops::sum_all(ops::silu(r.sum)));
      },
      {random_leaf({3, 5}, 1), random_leaf({3, 5}, 2), random_leaf({5}, 3)}));
}
