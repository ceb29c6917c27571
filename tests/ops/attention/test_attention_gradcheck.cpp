// Finite-difference gradient checks (F64, tests/support/gradcheck.h) of attention: causal
// and non-causal GQA, fewer queries than keys, explicit positions (keys out of order, a
// query that sees no key), a custom scale, and transposed (non-contiguous) q, k, v.
#include <gtest/gtest.h>

#include "microllm/ops/ops.h"
#include "ops/op_test_util.h"
#include "support/gradcheck.h"

using namespace microllm;
using microllm::testing::gradcheck;
using microllm::testing::random_leaf;
using microllm::testing::optest::ids;

namespace {
void check_attention(const Shape& q, const Shape& kv, const ops::AttentionOptions& options,
                     uint64_t seed) {
  EXPECT_TRUE(gradcheck(
      [=](const std::vector<Tensor>& in) { return ops::attention(in[0], in[1], in[2], options); },
      {random_leaf(q, seed), random_leaf(kv, seed + 1), random_leaf(kv, seed + 2)}));
}
}  // namespace

TEST(GradcheckAttention, CausalAndNonCausalGqa) {
  for (bool causal : {true, false}) {
    SCOPED_TRACE(causal ? "causal" : "non-causal");
    ops::AttentionOptions options;
    options.causal = causal;
    check_attention({1, 4, 3, 2}, {1, 2, 3, 2}, options, 21);  // GQA H=4, Hkv=2
    check_attention({2, 2, 3, 2}, {2, 2, 3, 2}, options, 24);  // H = Hkv, B = 2
  }
}

TEST(GradcheckAttention, FewerQueriesThanKeysDefaultPositions) {
  // T=2 < S=4: queries sit at positions 2, 3 and see keys 0..2 and 0..3.
  check_attention({1, 2, 2, 3}, {1, 1, 4, 3}, {}, 27);
  ops::AttentionOptions options;
  options.causal = false;
  check_attention({1, 2, 2, 3}, {1, 1, 4, 3}, options, 30);
}

TEST(GradcheckAttention, ExplicitPositionsAndScale) {
  ops::AttentionOptions options;
  options.q_positions = ids({1, 3}, {2});
  options.k_positions = ids({3, 0, 2, 1}, {4}, DType::I32);  // keys out of order
  check_attention({1, 2, 2, 2}, {1, 2, 4, 2}, options, 33);
  options.scale = 0.7;
  check_attention({1, 2, 2, 2}, {1, 2, 4, 2}, options, 36);
  // Query 0 precedes every key: its output is 0 and sends no gradient anywhere.
  options.q_positions = ids({-1, 2}, {2});
  options.k_positions = Tensor();
  check_attention({1, 2, 2, 2}, {1, 1, 3, 2}, options, 39);
}

TEST(GradcheckAttention, NonContiguousInputs) {
  // q, k, v (B, T, H, D) transposed to (B, H, T, D), as a model's projections are.
  EXPECT_TRUE(gradcheck(
      [](const std::vector<Tensor>& in) {
        return ops::attention(in[0].transpose(1, 2), in[1].transpose(1, 2), in[2].transpose(1, 2));
      },
      {random_leaf({1, 3, 4, 2}, 39), random_leaf({1, 3, 2, 2}, 40),
       random_leaf({1, 3, 2, 2}, 41)}));
}
