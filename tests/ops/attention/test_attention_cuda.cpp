// CUDA vs CPU for attention (materialized-scores kernel), forward and every input gradient,
// F32 at SPEC §6 tolerances and BF16 by relative L2 error. Covers GQA (H=14, Hkv=2, D=64)
// and H=Hkv (D=128), causal and full, odd lengths, decode (T < S), explicit positions on
// the device (I32 and I64), a custom scale, a query with no visible key, transposed
// (non-contiguous) q/k/v views, and a larger prefill.
#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include "cuda/cuda_test_utils.h"
#include "microllm/core/random.h"
#include "microllm/ops/ops.h"

using namespace microllm;
using microllm::testing::cuda_matches_cpu;
using microllm::testing::CudaCheckOptions;

namespace {

Tensor leaf(const Shape& shape, uint64_t seed, double mean = 0.0, double std = 1.0) {
  return microllm::testing::cuda_test_leaf(shape, seed, mean, std);
}

Tensor index_tensor(const std::vector<int64_t>& values, DType dtype) {
  return Tensor::from_vector(values, {static_cast<int64_t>(values.size())}, dtype);
}

CudaCheckOptions in(DType dtype) { return microllm::testing::options_in(dtype); }

constexpr const DType (&kDtypes)[2] = microllm::testing::kCudaTestDtypes;
const DType kIndexDtypes[] = {DType::I32, DType::I64};

struct AttentionCase {
  int64_t B, H, Hkv, T, S, D;
  bool causal;
};

std::string describe(const AttentionCase& c, DType dtype) {
  std::ostringstream out;
  out << dtype << " B " << c.B << " H " << c.H << " Hkv " << c.Hkv << " T " << c.T << " S " << c.S
      << " D " << c.D << (c.causal ? " causal" : " full");
  return out.str();
}

// q (B,H,T,D), k and v (B,Hkv,S,D) with default positions.
::testing::AssertionResult attention_matches(const AttentionCase& c, DType dtype, uint64_t seed,
                                             CudaCheckOptions o) {
  o.dtype = dtype;
  const Tensor q = leaf({c.B, c.H, c.T, c.D}, seed);
  const Tensor k = leaf({c.B, c.Hkv, c.S, c.D}, seed + 1);
  const Tensor v = leaf({c.B, c.Hkv, c.S, c.D}, seed + 2);
  ops::AttentionOptions options;
  options.causal = c.causal;
  return cuda_matches_cpu([&](const auto& x) { return ops::attention(x[0], x[1], x[2], options); },
                          {q, k, v}, o);
}

}  // namespace

TEST(CudaAttention, GqaAndFullHeadsOnOddLengths) {
  MICROLLM_REQUIRE_CUDA();
  std::vector<AttentionCase> cases;
  for (bool causal : {true, false})
    for (int64_t T : {1, 7, 33, 130}) {
      cases.push_back({1, 14, 2, T, T, 64, causal});  // Qwen2.5-0.5B heads
      cases.push_back({2, 3, 3, T, T, 128, causal});  // H = Hkv, D = 128
    }
  for (DType dtype : kDtypes)
    for (const AttentionCase& c : cases)
      EXPECT_TRUE(attention_matches(c, dtype, 21, {})) << describe(c, dtype);
}

TEST(CudaAttention, DecodeQueriesAgainstALongerCache) {
  MICROLLM_REQUIRE_CUDA();
  // Default positions put the T queries at the last T of the S keys.
  const std::vector<AttentionCase> cases = {{1, 14, 2, 1, 77, 64, true},
                                            {2, 14, 2, 1, 77, 64, true},
                                            {1, 4, 1, 5, 77, 64, true},
                                            {1, 2, 2, 3, 300, 128, false}};
  for (DType dtype : kDtypes)
    for (const AttentionCase& c : cases)
      EXPECT_TRUE(attention_matches(c, dtype, 31, {})) << describe(c, dtype);
}

TEST(CudaAttention, ExplicitPositionsCustomScaleAndAQueryWithoutVisibleKeys) {
  MICROLLM_REQUIRE_CUDA();
  const int64_t B = 2, H = 4, Hkv = 2, T = 6, S = 9, D = 64;
  // Query 0 sits before every key (position −1): no visible key, so zero output and
  // gradients. Keys are out of order, and two queries share a position.
  const std::vector<int64_t> q_pos = {-1, 0, 4, 4, 2, 11};
  const std::vector<int64_t> k_pos = {3, 0, 1, 2, 8, 4, 5, 7, 6};
  for (DType dtype : kDtypes)
    for (DType pos_dtype : kIndexDtypes) {
      const Tensor q = leaf({B, H, T, D}, 41), k = leaf({B, Hkv, S, D}, 42),
                   v = leaf({B, Hkv, S, D}, 43);
      // Positions are not floating, so cuda_matches_cpu moves them to the device as they are.
      const Tensor qp = index_tensor(q_pos, pos_dtype), kp = index_tensor(k_pos, pos_dtype);
      const auto fn = [](const auto& x) {
        ops::AttentionOptions o;
        o.q_positions = x[3];
        o.k_positions = x[4];
        o.scale = 0.3;
        return ops::attention(x[0], x[1], x[2], o);
      };
      EXPECT_TRUE(cuda_matches_cpu(fn, {q, k, v, qp, kp}, in(dtype)))
          << dtype << " positions " << pos_dtype;
      // The same positions without the mask, and T > S (allowed with explicit positions).
      const Tensor q_long = leaf({B, H, 11, D}, 44);
      std::vector<int64_t> long_pos;
      for (int64_t t = 0; t < 11; ++t) long_pos.push_back(t - 2);  // −2, −1: no visible key
      const auto fn_long = [](const auto& x) {
        ops::AttentionOptions o;
        o.q_positions = x[3];
        o.k_positions = x[4];
        o.scale = 0.05;
        return ops::attention(x[0], x[1], x[2], o);
      };
      EXPECT_TRUE(cuda_matches_cpu(fn_long, {q_long, k, v, index_tensor(long_pos, pos_dtype), kp},
                                   in(dtype)))
          << dtype << " T > S, positions " << pos_dtype;
      const auto fn_full = [](const auto& x) {
        ops::AttentionOptions o;
        o.causal = false;
        o.q_positions = x[3];
        o.k_positions = x[4];
        o.scale = 0.3;
        return ops::attention(x[0], x[1], x[2], o);
      };
      EXPECT_TRUE(cuda_matches_cpu(fn_full, {q, k, v, qp, kp}, in(dtype)))
          << dtype << " full, positions " << pos_dtype;
    }
}

TEST(CudaAttention, TransposedViewsAsModelsProduceThem) {
  MICROLLM_REQUIRE_CUDA();
  // Projections give (B, T, H, D); attention reads them transposed to (B, H, T, D).
  const int64_t B = 2, H = 14, Hkv = 2, T = 33, D = 64;
  for (DType dtype : kDtypes) {
    const Tensor q = leaf({B, T, H, D}, 51), k = leaf({B, T, Hkv, D}, 52),
                 v = leaf({B, T, Hkv, D}, 53);
    EXPECT_TRUE(cuda_matches_cpu(
        [](const auto& x) {
          return ops::attention(x[0].transpose(1, 2), x[1].transpose(1, 2), x[2].transpose(1, 2));
        },
        {q, k, v}, in(dtype)))
        << dtype;
  }
}

TEST(CudaAttention, LargerPrefill) {
  MICROLLM_REQUIRE_CUDA();
  const std::vector<AttentionCase> cases = {{2, 8, 8, 512, 512, 64, true},
                                            {1, 14, 2, 300, 300, 64, false}};
  for (DType dtype : kDtypes)
    for (const AttentionCase& c : cases)
      EXPECT_TRUE(attention_matches(c, dtype, 61, {})) << describe(c, dtype);
}
