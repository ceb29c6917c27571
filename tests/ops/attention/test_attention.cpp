// Forward values of ops::attention against a naive reference written here in double:
// S = Q·Kᵀ·scale with keys after the query's position masked, P = softmax(S), O = P·V, query
// head h reading KV head h / (H / Hkv). Covers GQA (including H=14, Hkv=2, D=64), T < S with
// default positions, explicit positions, custom scale, and that the causal mask holds.
// Also the error paths: bad GQA grouping, mismatched shapes and dtypes, wrong rank, a head
// dim of 0, positions of the wrong shape or dtype.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "microllm/ops/ops.h"
#include "ops/op_test_util.h"

using namespace microllm;
using microllm::testing::optest::all_close;
using microllm::testing::optest::ids;
using microllm::testing::optest::randn_tensor;

namespace {

struct RefOptions {
  bool causal = true;
  double scale = NAN;          // NaN: 1/sqrt(D)
  std::vector<int64_t> q_pos;  // empty: S-T .. S-1
  std::vector<int64_t> k_pos;  // empty: 0 .. S-1
};

// q (B, H, T, D), k/v (B, Hkv, S, D) → (B, H, T, D), all in double.
std::vector<double> ref_attention(const Tensor& q_t, const Tensor& k_t, const Tensor& v_t,
                                  RefOptions o) {
  const int64_t B = q_t.size(0), H = q_t.size(1), T = q_t.size(2), D = q_t.size(3);
  const int64_t Hkv = k_t.size(1), S = k_t.size(2);
  const std::vector<double> q = q_t.to_vector_f64(), k = k_t.to_vector_f64(),
                            v = v_t.to_vector_f64();
  const double scale = std::isnan(o.scale) ? 1.0 / std::sqrt(static_cast<double>(D)) : o.scale;
  if (o.q_pos.empty())
    for (int64_t t = 0; t < T; ++t) o.q_pos.push_back(S - T + t);
  if (o.k_pos.empty())
    for (int64_t s = 0; s < S; ++s) o.k_pos.push_back(s);
  std::vector<double> out(static_cast<size_t>(B * H * T * D), 0.0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      const int64_t hk = h / (H / Hkv);
      for (int64_t t = 0; t < T; ++t) {
        std::vector<double> p(S, 0.0);
        double mx = -std::numeric_limits<double>::infinity();
        for (int64_t s = 0; s < S; ++s) {
          if (o.causal && o.k_pos[s] > o.q_pos[t]) {
            p[s] = -std::numeric_limits<double>::infinity();
            continue;
          }
          double dot = 0.0;
          for (int64_t d = 0; d < D; ++d)
            dot += q[((b * H + h) * T + t) * D + d] * k[((b * Hkv + hk) * S + s) * D + d];
          p[s] = dot * scale;
          mx = std::max(mx, p[s]);
        }
        if (std::isinf(mx)) continue;  // no visible key: zeros
        double total = 0.0;
        for (int64_t s = 0; s < S; ++s) total += (p[s] = std::exp(p[s] - mx));
        for (int64_t s = 0; s < S; ++s)
          for (int64_t d = 0; d < D; ++d)
            out[((b * H + h) * T + t) * D + d] +=
                p[s] / total * v[((b * Hkv + hk) * S + s) * D + d];
      }
    }
  return out;
}

struct Qkv {
  Tensor q, k, v;
};
Qkv random_qkv(int64_t B, int64_t H, int64_t Hkv, int64_t T, int64_t S, int64_t D, uint64_t seed,
               DType dtype = DType::F64) {
  return {randn_tensor({B, H, T, D}, seed, dtype), randn_tensor({B, Hkv, S, D}, seed + 1, dtype),
          randn_tensor({B, Hkv, S, D}, seed + 2, dtype)};
}

}  // namespace

// ---- forward ---------------------------------------------------------------------------------

TEST(AttentionForward, GqaCausalAndNonCausalF64) {
  const Qkv x = random_qkv(2, 4, 2, 5, 5, 8, 1);
  for (bool causal : {true, false}) {
    SCOPED_TRACE(causal ? "causal" : "non-causal");
    ops::AttentionOptions options;
    options.causal = causal;
    RefOptions ref;
    ref.causal = causal;
    const Tensor out = ops::attention(x.q, x.k, x.v, options);
    EXPECT_EQ(out.shape(), (Shape{2, 4, 5, 8}));
    EXPECT_TRUE(all_close(out, ref_attention(x.q, x.k, x.v, ref), 1e-13));
  }
}

TEST(AttentionForward, QwenLikeGqaH14Hkv2D64) {
  const Qkv x = random_qkv(1, 14, 2, 3, 3, 64, 4, DType::F32);
  EXPECT_TRUE(
      all_close(ops::attention(x.q, x.k, x.v), ref_attention(x.q, x.k, x.v, {}), 2e-6, 1e-5));
  // Decode: one query at the end of a 4-token cache.
  const Qkv d = random_qkv(1, 14, 2, 1, 4, 64, 7, DType::F32);
  EXPECT_TRUE(
      all_close(ops::attention(d.q, d.k, d.v), ref_attention(d.q, d.k, d.v, {}), 2e-6, 1e-5));
}

TEST(AttentionForward, HeadsEqualKvHeads) {
  const Qkv x = random_qkv(1, 3, 3, 4, 4, 5, 10);
  EXPECT_TRUE(all_close(ops::attention(x.q, x.k, x.v), ref_attention(x.q, x.k, x.v, {}), 1e-13));
}

TEST(AttentionForward, FewerQueriesThanKeysUsesLastPositions) {
  // T=2, S=5: queries are positions 3 and 4 and see 4 and 5 keys.
  const Qkv x = random_qkv(1, 2, 1, 2, 5, 4, 13);
  EXPECT_TRUE(all_close(ops::attention(x.q, x.k, x.v), ref_attention(x.q, x.k, x.v, {}), 1e-13));
  // The last query sees every key: the same as non-causal for that row.
  ops::AttentionOptions open;
  open.causal = false;
  const std::vector<double> causal_out = ops::attention(x.q, x.k, x.v).to_vector_f64();
  const std::vector<double> open_out = ops::attention(x.q, x.k, x.v, open).to_vector_f64();
  for (int64_t h = 0; h < 2; ++h)
    for (int64_t d = 0; d < 4; ++d)
      EXPECT_NEAR(causal_out[(h * 2 + 1) * 4 + d], open_out[(h * 2 + 1) * 4 + d], 1e-15);
}

TEST(AttentionForward, ExplicitPositionsAndCustomScale) {
  const Qkv x = random_qkv(1, 2, 2, 3, 4, 4, 16);
  ops::AttentionOptions options;
  options.q_positions = ids({2, 0, 5}, {3}, DType::I32);
  options.k_positions = ids({1, 3, 0, 2}, {4});
  options.scale = 0.3;
  RefOptions ref;
  ref.q_pos = {2, 0, 5};
  ref.k_pos = {1, 3, 0, 2};
  ref.scale = 0.3;
  EXPECT_TRUE(
      all_close(ops::attention(x.q, x.k, x.v, options), ref_attention(x.q, x.k, x.v, ref), 1e-13));
}

TEST(AttentionForward, QueryWithNoVisibleKeyGetsZeros) {
  const Qkv x = random_qkv(1, 1, 1, 1, 2, 3, 19);
  ops::AttentionOptions options;
  options.q_positions = ids({0}, {1});
  options.k_positions = ids({1, 2}, {2});
  EXPECT_EQ(ops::attention(x.q, x.k, x.v, options).to_vector_f64(), std::vector<double>(3, 0.0));
}

TEST(AttentionForward, CausalMaskHidesFutureKeysAndValues) {
  const int64_t T = 5;
  const Qkv x = random_qkv(1, 2, 1, T, T, 4, 22);
  const std::vector<double> before = ops::attention(x.q, x.k, x.v).to_vector_f64();
  // Change key and value at position 3: queries 0..2 must not move; 3 and 4 must.
  Tensor k2 = x.k.clone(), v2 = x.v.clone();
  k2.narrow(2, 3, 1).fill(7.0);
  v2.narrow(2, 3, 1).fill(-5.0);
  const std::vector<double> after = ops::attention(x.q, k2, v2).to_vector_f64();
  for (int64_t h = 0; h < 2; ++h)
    for (int64_t t = 0; t < T; ++t) {
      double change = 0.0;
      for (int64_t d = 0; d < 4; ++d) {
        const size_t i = static_cast<size_t>((h * T + t) * 4 + d);
        change = std::max(change, std::fabs(after[i] - before[i]));
      }
      if (t < 3)
        EXPECT_EQ(change, 0.0) << "head " << h << " query " << t;
      else
        EXPECT_GT(change, 1e-6) << "head " << h << " query " << t;
    }
}

TEST(AttentionForward, DefaultScaleIsInverseSqrtD) {
  const Qkv x = random_qkv(1, 2, 1, 3, 3, 9, 25);
  ops::AttentionOptions options;
  options.scale = 1.0 / 3.0;
  EXPECT_TRUE(all_close(ops::attention(x.q, x.k, x.v),
                        ops::attention(x.q, x.k, x.v, options).to_vector_f64(), 1e-15));
}

// ---- bad input -------------------------------------------------------------------------------

namespace {
// Zero tensors of a shape, for the error cases.
Tensor f32(const Shape& shape) { return Tensor::zeros(shape, DType::F32); }
Tensor f64(const Shape& shape) { return Tensor::zeros(shape, DType::F64); }
Tensor i64(const Shape& shape) { return Tensor::zeros(shape, DType::I64); }
}  // namespace

TEST(BadInput, Attention) {
  EXPECT_ERROR(ops::attention(f32({1, 3, 2, 4}), f32({1, 2, 2, 4}), f32({1, 2, 2, 4})), "attention",
               {"query heads 3", "KV heads 2", "f32(1, 3, 2, 4)"});
  EXPECT_ERROR(ops::attention(f32({1, 2, 2, 4}), f32({1, 0, 2, 4}), f32({1, 0, 2, 4})), "attention",
               {"KV heads 0"});
  EXPECT_ERROR(ops::attention(f32({1, 2, 2, 4}), f32({1, 1, 2, 5}), f32({1, 1, 2, 5})), "attention",
               {"f32(1, 2, 2, 4)", "f32(1, 1, 2, 5)"});
  EXPECT_ERROR(ops::attention(f32({1, 2, 2, 4}), f32({1, 1, 2, 4}), f32({1, 1, 3, 4})), "attention",
               {"v f32(1, 1, 3, 4)"});
  EXPECT_ERROR(ops::attention(f32({2, 2, 2, 4}), f32({1, 1, 2, 4}), f32({1, 1, 2, 4})), "attention",
               {"f32(2, 2, 2, 4)", "f32(1, 1, 2, 4)"});
  EXPECT_ERROR(ops::attention(f32({2, 2, 4}), f32({1, 1, 2, 4}), f32({1, 1, 2, 4})), "attention",
               {"'q'", "rank 4", "f32(2, 2, 4)"});
  EXPECT_ERROR(ops::attention(f32({1, 2, 2, 4}), f64({1, 1, 2, 4}), f32({1, 1, 2, 4})), "attention",
               {"f32(1, 2, 2, 4)", "f64(1, 1, 2, 4)"});
  EXPECT_ERROR(ops::attention(f32({1, 1, 2, 0}), f32({1, 1, 2, 0}), f32({1, 1, 2, 0})), "attention",
               {"head dimension is 0", "f32(1, 1, 2, 0)"});
  ops::AttentionOptions options;
  options.q_positions = ids({0, 1, 2}, {3});
  EXPECT_ERROR(ops::attention(f32({1, 1, 2, 4}), f32({1, 1, 2, 4}), f32({1, 1, 2, 4}), options),
               "attention", {"q_positions", "(2)", "i64(3,)"});
  options.q_positions = Tensor();
  options.k_positions = f32({2});
  EXPECT_ERROR(ops::attention(f32({1, 1, 2, 4}), f32({1, 1, 2, 4}), f32({1, 1, 2, 4}), options),
               "attention", {"k_positions", "f32(2,)"});
  options.k_positions = i64({1, 2});
  EXPECT_ERROR(ops::attention(f32({1, 1, 2, 4}), f32({1, 1, 2, 4}), f32({1, 1, 2, 4}), options),
               "attention", {"k_positions", "i64(1, 2)"});
}

TEST(BadInput, AttentionBackend) {
  ops::AttentionOptions flash;
  flash.backend = ops::AttentionBackend::Flash;
  EXPECT_ERROR(ops::attention(f32({1, 2, 4, 64}), f32({1, 2, 4, 64}), f32({1, 2, 4, 64}), flash),
               "attention", {"flash backend runs on CUDA only", "f32(1, 2, 4, 64)"});
  EXPECT_EQ(ops::parse_attention_backend("auto"), ops::AttentionBackend::Auto);
  EXPECT_EQ(ops::parse_attention_backend("flash"), ops::AttentionBackend::Flash);
  EXPECT_EQ(ops::parse_attention_backend("reference"), ops::AttentionBackend::Reference);
  for (auto b : {ops::AttentionBackend::Auto, ops::AttentionBackend::Flash,
                 ops::AttentionBackend::Reference})
    EXPECT_EQ(ops::parse_attention_backend(ops::attention_backend_name(b)), b);
  EXPECT_ERROR(ops::parse_attention_backend("fast"), "attention",
               {"auto, reference or flash", "'fast'"});
  // On the CPU, Auto is the reference kernel: the same values as asking for it.
  const Tensor q = randn_tensor({1, 2, 5, 64}, 1), k = randn_tensor({1, 1, 5, 64}, 2),
               v = randn_tensor({1, 1, 5, 64}, 3);
  ops::AttentionOptions reference;
  reference.backend = ops::AttentionBackend::Reference;
  EXPECT_TRUE(
      all_close(ops::attention(q, k, v), ops::attention(q, k, v, reference).to_vector_f64(), 0));
}
