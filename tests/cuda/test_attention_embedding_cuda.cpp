// CUDA vs CPU for attention (materialized-scores kernel), embedding and index_select, forward
// and every input gradient, F32 at SPEC §6 tolerances and BF16 by relative L2 error.
// Covers GQA (H=14, Hkv=2, D=64) and H=Hkv (D=128), causal and full, odd lengths, decode
// (T < S), explicit positions on the device, a custom scale, a query with no visible key,
// transposed (non-contiguous) q/k/v views, repeated ids and indices (I32 and I64), Qwen's
// 151,936-entry vocabulary, and one large case per kernel family.
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

TEST(CudaEmbedding, RepeatedIdsInt32AndInt64) {
  MICROLLM_REQUIRE_CUDA();
  // Ids (3, 5) with repeats, the first and the last row. C = 24 takes 16-byte copies in
  // F32 and BF16; C = 7 takes 4-byte (F32) and 2-byte (BF16) copies.
  const std::vector<int64_t> id_values = {3, 0, 49, 3, 3, 17, 0, 49, 22, 3, 8, 17, 17, 1, 3};
  for (int64_t C : {24, 7})
    for (DType dtype : kDtypes)
      for (DType id_dtype : kIndexDtypes) {
        const Tensor weight = leaf({50, C}, 71);
        const Tensor ids = Tensor::from_vector(id_values, {3, 5}, id_dtype);
        EXPECT_TRUE(cuda_matches_cpu([](const auto& x) { return ops::embedding(x[0], x[1]); },
                                     {weight, ids}, in(dtype)))
            << dtype << " ids " << id_dtype << " C " << C;
      }
}

TEST(CudaEmbedding, QwenVocabularyWithSmallWidth) {
  MICROLLM_REQUIRE_CUDA();
  const int64_t V = 151936, C = 8;
  Generator gen(81);
  std::vector<int64_t> id_values = randint({257}, 0, V, gen).to_vector_i64();
  for (int64_t id : {int64_t{0}, V - 1, V - 1, int64_t{151643}, int64_t{0}, int64_t{151643}})
    id_values.push_back(id);
  for (DType dtype : kDtypes)
    for (DType id_dtype : kIndexDtypes) {
      const Tensor weight = leaf({V, C}, 82);
      const Tensor ids = index_tensor(id_values, id_dtype);
      EXPECT_TRUE(cuda_matches_cpu([](const auto& x) { return ops::embedding(x[0], x[1]); },
                                   {weight, ids}, in(dtype)))
          << dtype << " ids " << id_dtype;
    }
}

TEST(CudaEmbedding, SixteenMillionOutputsWithManyRepeats) {
  MICROLLM_REQUIRE_CUDA();
  // (N = 16384 tokens, C = 1024) = 16.8M outputs; 4096 ids, so each id repeats about 4 times
  // and the backward runs 64 tiles of ids through every class of rows.
  const int64_t V = 4096, C = 1024, N = 16384;
  Generator gen(91);
  const Tensor ids = randint({4, N / 4}, 0, V, gen, DType::I64);
  const Tensor weight = leaf({V, C}, 92);
  EXPECT_TRUE(
      cuda_matches_cpu([](const auto& x) { return ops::embedding(x[0], x[1]); }, {weight, ids}));
}

TEST(CudaIndexSelect, DimsZeroOneTwoWithRepeatedIndices) {
  MICROLLM_REQUIRE_CUDA();
  const std::vector<std::vector<int64_t>> indices = {
      {4, 0, 4, 2},        // dim 0 of (5, 6, 7)
      {5, 5, 0, 3, 1, 5},  // dim 1
      {6, 0, 6, 6, 3}};    // dim 2: one-element rows (4-byte F32, 2-byte BF16 copies)
  for (DType dtype : kDtypes)
    for (DType index_dtype : kIndexDtypes)
      for (int64_t dim = 0; dim < 3; ++dim) {
        const Tensor index = index_tensor(indices[dim], index_dtype);
        const auto fn = [dim](const auto& x) { return ops::index_select(x[0], dim, x[1]); };
        EXPECT_TRUE(cuda_matches_cpu(fn, {leaf({5, 6, 7}, 101), index}, in(dtype)))
            << dtype << " index " << index_dtype << " dim " << dim;
        // The same through a permuted (non-contiguous) view: (7, 6, 5) → (5, 6, 7).
        const auto fn_view = [dim](const auto& x) {
          return ops::index_select(x[0].permute({2, 1, 0}), dim, x[1]);
        };
        EXPECT_TRUE(cuda_matches_cpu(fn_view, {leaf({7, 6, 5}, 102), index}, in(dtype)))
            << dtype << " index " << index_dtype << " dim " << dim << " permuted view";
      }
}

TEST(CudaIndexSelect, LongIndicesOverFewColumns) {
  MICROLLM_REQUIRE_CUDA();
  // Few (outer, inner) columns and many indices: the backward splits target rows into
  // classes and walks several tiles of indices.
  Generator gen(111);
  const std::vector<int64_t> short_index = randint({1000}, 0, 3, gen).to_vector_i64();
  const std::vector<int64_t> wide_index = randint({700}, 0, 300, gen).to_vector_i64();
  for (DType dtype : kDtypes)
    for (DType index_dtype : kIndexDtypes) {
      EXPECT_TRUE(cuda_matches_cpu([](const auto& x) { return ops::index_select(x[0], 0, x[1]); },
                                   {leaf({3}, 112), index_tensor(short_index, index_dtype)},
                                   in(dtype)))
          << dtype << " index " << index_dtype << " x (3)";
      EXPECT_TRUE(cuda_matches_cpu([](const auto& x) { return ops::index_select(x[0], 1, x[1]); },
                                   {leaf({2, 300, 3}, 113), index_tensor(wide_index, index_dtype)},
                                   in(dtype)))
          << dtype << " index " << index_dtype << " x (2, 300, 3)";
    }
}

TEST(CudaIndexSelect, SixteenMillionOutputsAlongAMiddleDim) {
  MICROLLM_REQUIRE_CUDA();
  // x (8, 1000, 1024) → (8, 2048, 1024) = 16.8M outputs; 16-byte copies in both dtypes.
  Generator gen(121);
  const Tensor index = randint({2048}, 0, 1000, gen, DType::I32);
  const Tensor x = leaf({8, 1000, 1024}, 122);
  for (DType dtype : kDtypes) {
    CudaCheckOptions o = in(dtype);
    o.check_backward = dtype == DType::F32;
    EXPECT_TRUE(cuda_matches_cpu([](const auto& v) { return ops::index_select(v[0], 1, v[1]); },
                                 {x, index}, o))
        << dtype;
  }
}

TEST(CudaDeterminism, AttentionAndEmbeddingGradientsRepeatBitwise) {
  MICROLLM_REQUIRE_CUDA();
  // No atomics: two runs of the same backward give the same bits.
  const Device gpu = Device::cuda(0);
  auto grads = [&]() {
    Tensor q = leaf({2, 14, 65, 64}, 131).to(gpu).detach().set_requires_grad(true);
    Tensor k = leaf({2, 2, 65, 64}, 132).to(gpu).detach().set_requires_grad(true);
    Tensor v = leaf({2, 2, 65, 64}, 133).to(gpu).detach().set_requires_grad(true);
    Tensor w = leaf({1000, 96}, 134).to(gpu).detach().set_requires_grad(true);
    Generator gen(135);
    const Tensor ids = randint({512}, 0, 10, gen, DType::I64, gpu);  // many repeats
    // Random output gradients, so the order of the sums shows in the bits.
    ops::attention(q, k, v).backward(randn({2, 14, 65, 64}, gen, DType::F32, gpu));
    ops::embedding(w, ids).backward(randn({512, 96}, gen, DType::F32, gpu));
    return std::vector<std::vector<double>>{q.grad().to_vector_f64(), k.grad().to_vector_f64(),
                                            v.grad().to_vector_f64(), w.grad().to_vector_f64()};
  };
  const auto first = grads(), second = grads();
  for (size_t i = 0; i < first.size(); ++i) EXPECT_EQ(first[i], second[i]) << "gradient " << i;
}
