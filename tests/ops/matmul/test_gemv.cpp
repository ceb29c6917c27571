// ops::gemv_out, the decode projection, on the CPU (the reference the CUDA kernel is held
// to): against matmul_naive (plain F64 loops) with and without bias, the SwiGLU epilogue
// against swiglu of the two F64 products, every row count 1..8, the norm prologue and
// residual epilogue (GemvFusion) against F64 loops of their formulas, and the error paths.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/expect_error.h"
#include "microllm/ops/ops.h"
#include "ops/matmul/gemv_test_util.h"
#include "ops/op_test_util.h"

using namespace microllm;
using microllm::testing::throws_error;
using microllm::testing::gemv::abs_values;
using microllm::testing::gemv::worst_error;
using microllm::testing::optest::randn_tensor;

TEST(Gemv, MatchesTheNaiveProductWithAndWithoutBias) {
  for (DType dtype : {DType::F32, DType::F64})
    for (int64_t M = 1; M <= ops::kGemvMaxRows; ++M)
      for (bool with_bias : {false, true}) {
        const int64_t K = 37, N = 23;
        const Tensor x = randn_tensor({M, K}, 10 + static_cast<uint64_t>(M), dtype);
        const Tensor w = randn_tensor({N, K}, 20, dtype);
        const Tensor b = with_bias ? randn_tensor({N}, 30, dtype) : Tensor();
        Tensor y = Tensor::empty({M, N}, dtype);
        ops::gemv_out(x, w, b, y);
        Tensor want = ops::matmul_naive(x.to(DType::F64), w.to(DType::F64), false, true);
        if (with_bias) want = ops::add(want, b.to(DType::F64));
        const Tensor mag =
            ops::matmul_naive(abs_values(x, DType::F64), abs_values(w, DType::F64), false, true);
        const double rtol = dtype == DType::F64 ? 1e-13 : 2e-6;
        EXPECT_LT(worst_error(y, want, mag), rtol) << dtype << " M " << M << " bias " << with_bias;
      }
}

TEST(Gemv, SwigluEpilogueMatchesSwigluOfTheTwoHalves) {
  for (int64_t M : {1, 3, 8}) {
    const int64_t K = 40, F = 19;
    const Tensor x = randn_tensor({M, K}, 40 + static_cast<uint64_t>(M), DType::F64);
    const Tensor w = randn_tensor({2 * F, K}, 50, DType::F64);
    Tensor y = Tensor::empty({M, F}, DType::F64);
    ops::gemv_out(x, w, Tensor(), y, ops::GemvEpilogue::swiglu);
    const Tensor gate = ops::matmul_naive(x, w.narrow(0, 0, F).contiguous(), false, true);
    const Tensor up = ops::matmul_naive(x, w.narrow(0, F, F).contiguous(), false, true);
    const std::vector<double> got = y.to_vector_f64(), g = gate.to_vector_f64(),
                              u = up.to_vector_f64();
    for (size_t i = 0; i < got.size(); ++i) {
      const double want = g[i] / (1.0 + std::exp(-g[i])) * u[i];
      EXPECT_NEAR(got[i], want, 1e-12 * (1.0 + std::fabs(want))) << "M " << M << " element " << i;
    }
  }
}

TEST(Gemv, ARowGivesTheSameBitsAloneAndWithOthers) {
  const Tensor x = randn_tensor({8, 64}, 60, DType::F32);
  const Tensor w = randn_tensor({33, 64}, 61, DType::F32);
  Tensor all = Tensor::empty({8, 33}, DType::F32), one = Tensor::empty({1, 33}, DType::F32);
  ops::gemv_out(x, w, Tensor(), all);
  for (int64_t m = 0; m < 8; ++m) {
    ops::gemv_out(x.narrow(0, m, 1).contiguous(), w, Tensor(), one);
    EXPECT_EQ(one.to_vector_f32(), all.narrow(0, m, 1).contiguous().to_vector_f32()) << m;
  }
}

// y = residual + W · (g ⊙ x / sqrt(mean(x²) + eps)) (+ bias), each row in F64 loops.
TEST(Gemv, NormPrologueAndResidualEpilogueMatchTheirFormulas) {
  for (DType dtype : {DType::F32, DType::F64})
    for (int64_t M : {1, 4, 8})
      for (bool residual : {false, true}) {
        const int64_t K = 48, N = 21;
        const double eps = 1e-5;
        const Tensor x = randn_tensor({M, K}, 70 + static_cast<uint64_t>(M), dtype);
        const Tensor w = randn_tensor({N, K}, 71, dtype);
        const Tensor b = randn_tensor({N}, 72, dtype);
        const Tensor g = randn_tensor({K}, 73, dtype);
        const Tensor r = randn_tensor({M, N}, 74, dtype);
        ops::GemvFusion f;
        f.norm_weight = g;
        f.norm_eps = eps;
        Tensor y = residual ? r.clone() : Tensor::empty({M, N}, dtype);
        if (residual) f.residual = y;  // in place
        ops::gemv_out(x, w, b, y, f);
        const std::vector<double> xv = x.to_vector_f64(), wv = w.to_vector_f64(),
                                  bv = b.to_vector_f64(), gv = g.to_vector_f64(),
                                  rv = r.to_vector_f64(), got = y.to_vector_f64();
        for (int64_t m = 0; m < M; ++m) {
          double ss = 0.0;
          for (int64_t k = 0; k < K; ++k) ss += xv[m * K + k] * xv[m * K + k];
          const double inv = 1.0 / std::sqrt(ss / K + eps);
          for (int64_t n = 0; n < N; ++n) {
            double dot = 0.0, mag = 0.0;
            for (int64_t k = 0; k < K; ++k) {
              const double h = gv[k] * xv[m * K + k] * inv;
              dot += h * wv[n * K + k];
              mag += std::fabs(h * wv[n * K + k]);
            }
            const double want = dot + bv[n] + (residual ? rv[m * N + n] : 0.0);
            const double tol = (dtype == DType::F64 ? 1e-12 : 1e-5) * (mag + 1.0);
            EXPECT_NEAR(got[m * N + n], want, tol) << dtype << " M " << M << " n " << n;
          }
        }
      }
}

// The rope_kv_write epilogue on the CPU: the product's q, k, v parts through rope_kv_write,
// against F64 loops of x·Wᵀ + bias, the rotation and the cache slots (F32 caches).
TEST(Gemv, RopeKvWriteEpilogueMatchesItsFormula) {
  const int64_t M = 3, K = 16, H = 2, Hkv = 1, D = 4, NB = 2, BS = 2, half = D / 2;
  const int64_t width = (H + 2 * Hkv) * D;
  const Tensor x = randn_tensor({M, K}, 80, DType::F32);
  const Tensor w = randn_tensor({width, K}, 81, DType::F32);
  const Tensor b = randn_tensor({width}, 82, DType::F32);
  const std::vector<int64_t> pos = {3, 10, 41}, slot = {2, -1, 0};
  const std::vector<double> freq = {1.0, 0.01};
  ops::GemvFusion f;
  f.epilogue = ops::GemvEpilogue::rope_kv_write;
  f.rope = {
      Tensor::from_vector(pos, {M}, DType::I32),  Tensor::from_vector(freq, {half}, DType::F32),
      Tensor::from_vector(slot, {M}, DType::I32), Tensor::empty({M, H, D}, DType::F32),
      Tensor::empty({M, Hkv, D}, DType::F32),     Tensor::zeros({NB, BS, Hkv, D}, DType::F32),
      Tensor::zeros({NB, BS, Hkv, D}, DType::F32)};
  ops::gemv_out(x, w, b, Tensor(), f);
  const std::vector<double> xv = x.to_vector_f64(), wv = w.to_vector_f64(), bv = b.to_vector_f64(),
                            q = f.rope.q_out.to_vector_f64(), k = f.rope.k_out.to_vector_f64(),
                            kc = f.rope.k_cache.to_vector_f64(),
                            vc = f.rope.v_cache.to_vector_f64();
  for (int64_t m = 0; m < M; ++m) {
    std::vector<double> p(static_cast<size_t>(width));
    for (int64_t n = 0; n < width; ++n) {
      double dot = bv[n];
      for (int64_t j = 0; j < K; ++j) dot += xv[m * K + j] * wv[n * K + j];
      p[static_cast<size_t>(n)] = dot;
    }
    for (int64_t h = 0; h < H + Hkv; ++h)
      for (int64_t i = 0; i < half; ++i) {
        const double a = p[h * D + i], c = p[h * D + i + half], angle = pos[m] * freq[i];
        const double y1 = a * std::cos(angle) - c * std::sin(angle);
        const double y2 = c * std::cos(angle) + a * std::sin(angle);
        const std::vector<double>& got = h < H ? q : k;
        const int64_t at = h < H ? (m * H + h) * D : m * D;
        EXPECT_NEAR(got[at + i], y1, 2e-5) << "m " << m << " head " << h;
        EXPECT_NEAR(got[at + i + half], y2, 2e-5) << "m " << m << " head " << h;
        if (h == H && slot[m] >= 0) {
          EXPECT_NEAR(kc[slot[m] * D + i], y1, 2e-5) << "k cache, m " << m;
          EXPECT_NEAR(kc[slot[m] * D + i + half], y2, 2e-5) << "k cache, m " << m;
        }
      }
    for (int64_t i = 0; i < D && slot[m] >= 0; ++i)
      EXPECT_NEAR(vc[slot[m] * D + i], p[(H + Hkv) * D + i], 2e-5) << "v cache, m " << m;
  }
  // Slot 1 (row 1's −1) and 3 are never written.
  for (int64_t i = 0; i < D; ++i) {
    EXPECT_EQ(kc[1 * D + i], 0.0);
    EXPECT_EQ(vc[3 * D + i], 0.0);
  }
}

TEST(Gemv, RejectsWhatItDoesNotTake) {
  const Tensor x = randn_tensor({2, 16}, 1, DType::F32);
  const Tensor w = randn_tensor({6, 16}, 2, DType::F32);
  const Tensor y = Tensor::empty({2, 6}, DType::F32);
  EXPECT_TRUE(throws_error(
      [&] {
        ops::gemv_out(randn_tensor({9, 16}, 3, DType::F32), w, {},
                      Tensor::empty({9, 6}, DType::F32));
      },
      "gemv_out", {"takes 1 to 8 rows", "found x"}));
  EXPECT_TRUE(throws_error(
      [&] {
        ops::gemv_out(x, randn_tensor({6, 15}, 4, DType::F32), {}, y);
      },
      "gemv_out", {"expected x (M, in) and weight (out, in)"}));
  EXPECT_TRUE(throws_error(
      [&] {
        ops::gemv_out(x, w, {}, Tensor::empty({2, 5}, DType::F32));
      },
      "gemv_out", {"must have shape"}));
  EXPECT_TRUE(throws_error([&] { ops::gemv_out(x, w, randn_tensor({5}, 5, DType::F32), y); },
                           "gemv_out", {"bias must be (6)"}));
  EXPECT_TRUE(throws_error(
      [&] {
        ops::gemv_out(x, randn_tensor({7, 16}, 6, DType::F32), {},
                      Tensor::empty({2, 3}, DType::F32), ops::GemvEpilogue::swiglu);
      },
      "gemv_out", {"fused (2F, in) gate/up weight"}));
  EXPECT_TRUE(throws_error(
      [&] {
        ops::gemv_out(x, w, randn_tensor({3}, 7, DType::F32), Tensor::empty({2, 3}, DType::F32),
                      ops::GemvEpilogue::swiglu);
      },
      "gemv_out", {"takes no bias"}));
  EXPECT_TRUE(
      throws_error([&] { ops::gemv_out(x.to(DType::F64), w, {}, y); }, "gemv_out", {"dtype"}));
  ops::GemvFusion norm;
  norm.norm_weight = randn_tensor({15}, 8, DType::F32);
  EXPECT_TRUE(throws_error([&] { ops::gemv_out(x, w, {}, y, norm); }, "gemv_out",
                           {"norm_weight must be (16)"}));
  ops::GemvFusion swiglu_residual;
  swiglu_residual.epilogue = ops::GemvEpilogue::swiglu;
  swiglu_residual.residual = Tensor::empty({2, 3}, DType::F32);
  EXPECT_TRUE(throws_error(
      [&] {
        ops::gemv_out(x, w, {}, Tensor::empty({2, 3}, DType::F32), swiglu_residual);
      },
      "gemv_out", {"only the plain epilogue takes a residual"}));
  ops::GemvFusion wrong_shape;
  wrong_shape.residual = Tensor::empty({2, 5}, DType::F32);
  EXPECT_TRUE(throws_error([&] { ops::gemv_out(x, w, {}, y, wrong_shape); }, "gemv_out",
                           {"'residual'", "must have shape"}));
  // The rope_kv_write epilogue writes its targets, not out, and needs the QKV weight.
  ops::GemvFusion rope;
  rope.epilogue = ops::GemvEpilogue::rope_kv_write;
  rope.rope = {Tensor::from_vector(std::vector<int64_t>{0, 1}, {2}, DType::I32),
               Tensor::from_vector(std::vector<double>{1.0, 0.5}, {2}, DType::F32),
               Tensor::from_vector(std::vector<int64_t>{0, 1}, {2}, DType::I32),
               Tensor::empty({2, 2, 4}, DType::F32),
               Tensor::empty({2, 1, 4}, DType::F32),
               Tensor::zeros({2, 2, 1, 4}, DType::F32),
               Tensor::zeros({2, 2, 1, 4}, DType::F32)};
  const Tensor w_qkv = randn_tensor({16, 16}, 11, DType::F32);  // (H + 2·Hkv)·D = 16
  EXPECT_TRUE(throws_error([&] { ops::gemv_out(x, w_qkv, {}, y, rope); }, "gemv_out",
                           {"out must be undefined"}));
  EXPECT_TRUE(throws_error([&] { ops::gemv_out(x, w, {}, Tensor(), rope); }, "gemv_out",
                           {"fused QKV weight (16, in)"}));
  // The residual may be out (in place) but not x.
  const Tensor square = randn_tensor({2, 16}, 9, DType::F32);
  const Tensor w16 = randn_tensor({16, 16}, 10, DType::F32);
  ops::GemvFusion reads_x;
  reads_x.residual = square;
  EXPECT_TRUE(throws_error(
      [&] {
        ops::gemv_out(square, w16, {}, Tensor::empty({2, 16}, DType::F32), reads_x);
      },
      "gemv_out", {"'residual'", "overlaps 'x'"}));
  EXPECT_FALSE(ops::gemv_supported(Device::cpu(), DType::BF16, 1, 16));
  EXPECT_FALSE(ops::gemv_supported(Device::cpu(), DType::F32, ops::kGemvMaxRows + 1, 16));
  EXPECT_TRUE(ops::gemv_supported(Device::cpu(), DType::F32, ops::kGemvMaxRows, 16));
  ops::GemvFusion too_few;  // kernel_rows below x's rows
  too_few.kernel_rows = 1;
  EXPECT_TRUE(throws_error([&] { ops::gemv_out(x, w, {}, y, too_few); }, "gemv_out",
                           {"kernel_rows", "found 1"}));
  ops::GemvFusion too_many;
  too_many.kernel_rows = ops::kGemvMaxRows + 1;
  EXPECT_TRUE(throws_error([&] { ops::gemv_out(x, w, {}, y, too_many); }, "gemv_out",
                           {"kernel_rows", "found 9"}));
}
