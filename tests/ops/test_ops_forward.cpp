// Forward values of the CPU operators against references written here as plain loops in
// double: elementwise, softmax / log_softmax (also on huge inputs), rms_norm, silu, swiglu,
// rope (rotate-half, theta = 10000), embedding, cross_entropy, reductions, concat,
// index_select, and BF16 inputs against the F32 result. Attention has its own file.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <vector>

#include "microllm/ops/ops.h"
#include "ops/op_test_util.h"

using namespace microllm;
using microllm::testing::optest::all_close;
using microllm::testing::optest::f64;
using microllm::testing::optest::ids;
using microllm::testing::optest::randn_tensor;

namespace {

// Softmax of one row, no max subtraction (inputs here are small).
std::vector<double> ref_softmax(const std::vector<double>& row) {
  double total = 0.0;
  for (double v : row) total += std::exp(v);
  std::vector<double> out;
  for (double v : row) out.push_back(std::exp(v) / total);
  return out;
}

// x (R, N) row-major → softmax / log_softmax of every row.
std::vector<double> ref_softmax_rows(const std::vector<double>& x, int64_t n, bool log) {
  std::vector<double> out;
  for (size_t r = 0; r < x.size() / n; ++r) {
    std::vector<double> row(x.begin() + r * n, x.begin() + (r + 1) * n);
    for (double p : ref_softmax(row)) out.push_back(log ? std::log(p) : p);
  }
  return out;
}

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

}  // namespace

// ---- elementwise ------------------------------------------------------------------------------

TEST(OpsForward, ElementwiseBroadcastValues) {
  const Tensor a = f64({1, 2, 3, 4, 5, 6}, {2, 3});
  const Tensor b = f64({10, 20, 40}, {3});
  EXPECT_TRUE(all_close(ops::add(a, b), {11, 22, 43, 14, 25, 46}, 0.0));
  EXPECT_TRUE(all_close(ops::sub(b, a), {9, 18, 37, 6, 15, 34}, 0.0));
  EXPECT_TRUE(all_close(ops::mul(a, f64({2, -1}, {2, 1})), {2, 4, 6, -4, -5, -6}, 0.0));
  EXPECT_TRUE(all_close(ops::div(a, b), {0.1, 0.1, 0.075, 0.4, 0.25, 0.15}, 1e-15));
  EXPECT_EQ(ops::add(a, b).shape(), (Shape{2, 3}));
  EXPECT_EQ(ops::add(f64({1}, {1, 1}), a).shape(), (Shape{2, 3}));
}

TEST(OpsForward, UnaryValues) {
  const std::vector<double> v = {0.25, 1.0, 4.0};
  const Tensor x = f64(v, {3});
  std::vector<double> e, l, s, r, p;
  for (double a : v) {
    e.push_back(std::exp(a));
    l.push_back(std::log(a));
    s.push_back(std::sqrt(a));
    r.push_back(1.0 / std::sqrt(a));
    p.push_back(std::pow(a, 1.5));
  }
  EXPECT_TRUE(all_close(ops::exp(x), e, 0.0, 1e-15));
  EXPECT_TRUE(all_close(ops::log(x), l, 1e-15));
  EXPECT_TRUE(all_close(ops::sqrt(x), s, 0.0, 1e-15));
  EXPECT_TRUE(all_close(ops::rsqrt(x), r, 0.0, 1e-15));
  EXPECT_TRUE(all_close(ops::pow(x, 1.5), p, 0.0, 1e-15));
  EXPECT_TRUE(all_close(ops::neg(x), {-0.25, -1.0, -4.0}, 0.0));
  EXPECT_TRUE(all_close(ops::scale(x, 3.0), {0.75, 3.0, 12.0}, 0.0));
  EXPECT_TRUE(all_close(ops::add_scalar(x, -1.0), {-0.75, 0.0, 3.0}, 0.0));
}

// ---- softmax ----------------------------------------------------------------------------------

TEST(OpsForward, SoftmaxRowsSumToOneAndMatch) {
  const Tensor x = randn_tensor({3, 5}, 1);
  const std::vector<double> xv = x.to_vector_f64();
  const Tensor y = ops::softmax(x, -1);
  EXPECT_TRUE(all_close(y, ref_softmax_rows(xv, 5, false), 1e-15));
  const std::vector<double> yv = y.to_vector_f64();
  for (int r = 0; r < 3; ++r) {
    double total = 0.0;
    for (int i = 0; i < 5; ++i) total += yv[r * 5 + i];
    EXPECT_NEAR(total, 1.0, 1e-14);
  }
  // F32 input, F32 output, same values.
  const Tensor y32 = ops::softmax(x.to(DType::F32), -1);
  EXPECT_EQ(y32.dtype(), DType::F32);
  EXPECT_TRUE(all_close(y32, ref_softmax_rows(xv, 5, false), 1e-6));
}

TEST(OpsForward, SoftmaxAlongNonLastDim) {
  const Tensor x = randn_tensor({4, 3}, 2);  // softmax over dim 0 = rows of xᵀ
  const std::vector<double> xt = x.transpose(0, 1).to_vector_f64();
  const std::vector<double> want_t = ref_softmax_rows(xt, 4, false);
  const std::vector<double> got_t = ops::softmax(x, 0).transpose(0, 1).to_vector_f64();
  EXPECT_TRUE(all_close(got_t, want_t, 1e-15));
  EXPECT_TRUE(all_close(ops::log_softmax(x, 0).transpose(0, 1).to_vector_f64(),
                        ref_softmax_rows(xt, 4, true), 1e-14));
}

TEST(OpsForward, LogSoftmaxMatches) {
  const Tensor x = randn_tensor({2, 3, 4}, 3);
  EXPECT_TRUE(
      all_close(ops::log_softmax(x, -1), ref_softmax_rows(x.to_vector_f64(), 4, true), 1e-14));
}

TEST(OpsForward, StableSoftmaxOnHugeInputs) {
  for (DType dtype : {DType::F32, DType::F64}) {
    SCOPED_TRACE(std::string(dtype_name(dtype)));
    // exp(1000) overflows: only max subtraction keeps these finite.
    const Tensor x = Tensor::from_vector(std::vector<double>{1000, 1001, 999, -1000, -1001, -999},
                                         {2, 3}, dtype);
    const std::vector<double> y = ops::softmax(x, -1).to_vector_f64();
    const std::vector<double> ly = ops::log_softmax(x, -1).to_vector_f64();
    for (double v : y) EXPECT_TRUE(std::isfinite(v));
    for (double v : ly) EXPECT_TRUE(std::isfinite(v));
    std::vector<double> want = ref_softmax({0, 1, -1});
    const std::vector<double> second = ref_softmax({1, 0, 2});
    want.insert(want.end(), second.begin(), second.end());
    EXPECT_TRUE(all_close(y, want, 1e-6));
    std::vector<double> log_want;
    for (double p : want) log_want.push_back(std::log(p));
    EXPECT_TRUE(all_close(ly, log_want, 1e-5));
  }
}

TEST(OpsForward, SoftmaxWithMaskedEntries) {
  // −inf entries (a mask) get probability 0 and the rest renormalize.
  const double inf = std::numeric_limits<double>::infinity();
  const Tensor x = f64({-inf, 0.0, 1.0, 2.0, -inf, -inf}, {2, 3});
  const std::vector<double> first = ref_softmax({0.0, 1.0});
  EXPECT_TRUE(all_close(ops::softmax(x, -1), {0.0, first[0], first[1], 1.0, 0.0, 0.0}, 1e-15));
  const std::vector<double> log_y = ops::log_softmax(x, -1).to_vector_f64();
  EXPECT_EQ(log_y[0], -inf);
  EXPECT_NEAR(log_y[2], std::log(first[1]), 1e-15);
  EXPECT_EQ(log_y[3], 0.0);
}

// ---- rms_norm, silu, swiglu
// ----------------------------------------------------------------------

TEST(OpsForward, RmsNormMatches) {
  const int64_t C = 6;
  const double eps = 1e-5;
  const Tensor x = randn_tensor({2, 2, C}, 4);
  const Tensor w = randn_tensor({C}, 5);
  const std::vector<double> xv = x.to_vector_f64(), wv = w.to_vector_f64();
  std::vector<double> want;
  for (size_t r = 0; r < xv.size() / C; ++r) {
    double ss = 0.0;
    for (int64_t i = 0; i < C; ++i) ss += xv[r * C + i] * xv[r * C + i];
    const double rstd = 1.0 / std::sqrt(ss / C + eps);
    for (int64_t i = 0; i < C; ++i) want.push_back(xv[r * C + i] * rstd * wv[i]);
  }
  EXPECT_TRUE(all_close(ops::rms_norm(x, w, eps), want, 1e-14));
  EXPECT_TRUE(all_close(ops::rms_norm(x.to(DType::F32), w.to(DType::F32), eps), want, 1e-5));
  // add_rms_norm of (x − r, r) gives the same normed values and sum = x.
  const Tensor residual = randn_tensor({2, 2, C}, 6);
  auto fused = ops::add_rms_norm(ops::sub(x, residual), residual, w, eps);
  EXPECT_TRUE(all_close(fused.sum, xv, 1e-14));
  EXPECT_TRUE(all_close(fused.normed, want, 1e-13));
}

TEST(OpsForward, SiluSwigluMatch) {
  const Tensor gate = randn_tensor({3, 4}, 7, DType::F64, 0.0, 4.0);
  const Tensor up = randn_tensor({3, 4}, 8);
  const std::vector<double> g = gate.to_vector_f64(), u = up.to_vector_f64();
  std::vector<double> silu, swiglu;
  for (size_t i = 0; i < g.size(); ++i) {
    silu.push_back(g[i] * sigmoid(g[i]));
    swiglu.push_back(g[i] * sigmoid(g[i]) * u[i]);
  }
  EXPECT_TRUE(all_close(ops::silu(gate), silu, 1e-15, 1e-14));
  EXPECT_TRUE(all_close(ops::swiglu(gate, up), swiglu, 1e-15, 1e-14));
  EXPECT_TRUE(all_close(ops::silu(gate.to(DType::F32)), silu, 1e-6, 1e-6));
  // Large negative and positive inputs: silu → 0 and → x.
  EXPECT_TRUE(all_close(ops::silu(f64({-80.0, 80.0}, {2})), {0.0, 80.0}, 1e-30, 1e-15));
}

// ---- rope -------------------------------------------------------------------------------------

namespace {
// Rotate-half RoPE of x (B, H, T, D) with positions (B, T) and inv_freq (D/2), in double.
std::vector<double> ref_rope(const std::vector<double>& x, const Shape& s,
                             const std::vector<int64_t>& pos_bt,
                             const std::vector<double>& inv_freq) {
  const int64_t B = s[0], H = s[1], T = s[2], D = s[3], half = D / 2;
  std::vector<double> y(x.size());
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t t = 0; t < T; ++t) {
        const int64_t row = ((b * H + h) * T + t) * D;
        for (int64_t i = 0; i < half; ++i) {
          const double angle = static_cast<double>(pos_bt[b * T + t]) * inv_freq[i];
          const double x1 = x[row + i], x2 = x[row + i + half];
          y[row + i] = x1 * std::cos(angle) - x2 * std::sin(angle);
          y[row + i + half] = x2 * std::cos(angle) + x1 * std::sin(angle);
        }
      }
  return y;
}

std::vector<double> ref_inv_freq(int64_t D, double theta) {
  std::vector<double> f;
  for (int64_t i = 0; i < D / 2; ++i)
    f.push_back(std::pow(theta, -2.0 * i / static_cast<double>(D)));
  return f;
}
}  // namespace

TEST(OpsForward, RopeInvFreqMatchesTheta) {
  EXPECT_TRUE(all_close(ops::rope_inv_freq(8, 10000.0), ref_inv_freq(8, 10000.0), 0.0, 1e-6));
  EXPECT_TRUE(all_close(ops::rope_inv_freq(64, 10000.0), ref_inv_freq(64, 10000.0), 0.0, 1e-6));
}

TEST(OpsForward, RopeMatchesRotateHalf) {
  const Shape s = {2, 2, 3, 8};  // (B, H, T, D)
  const Tensor x = randn_tensor(s, 9);
  const std::vector<double> freq = ref_inv_freq(8, 10000.0);
  const Tensor inv_freq = f64(freq, {4});
  // Positions (T), the same for every batch row.
  const std::vector<int64_t> pos_t = {0, 5, 17};
  EXPECT_TRUE(all_close(ops::rope(x, ids(pos_t, {3}), inv_freq),
                        ref_rope(x.to_vector_f64(), s, {0, 5, 17, 0, 5, 17}, freq), 1e-13));
  // Positions (B, T), different per batch row, as i32.
  const std::vector<int64_t> pos_bt = {3, 4, 100, 9, 0, 2};
  EXPECT_TRUE(all_close(ops::rope(x, ids(pos_bt, {2, 3}, DType::I32), inv_freq),
                        ref_rope(x.to_vector_f64(), s, pos_bt, freq), 1e-12));
  // F32 with the library's F32 frequencies.
  EXPECT_TRUE(
      all_close(ops::rope(x.to(DType::F32), ids(pos_t, {3}), ops::rope_inv_freq(8, 10000.0)),
                ref_rope(x.to_vector_f64(), s, {0, 5, 17, 0, 5, 17}, freq), 2e-5));
}

TEST(OpsForward, RopeAtPositionZeroIsIdentity) {
  const Tensor x = randn_tensor({1, 3, 4, 6}, 10, DType::F32);
  const Tensor y = ops::rope(x, Tensor::zeros({4}, DType::I64), ops::rope_inv_freq(6, 10000.0));
  EXPECT_EQ(y.to_vector_f64(), x.to_vector_f64());
}

// ---- embedding, cross-entropy
// --------------------------------------------------------------------

TEST(OpsForward, EmbeddingPicksRows) {
  const Tensor weight = randn_tensor({5, 3}, 11);
  const std::vector<double> w = weight.to_vector_f64();
  const std::vector<int64_t> id_values = {4, 0, 4, 2};
  for (DType dtype : {DType::F64, DType::BF16}) {
    const Tensor table = weight.to(dtype);
    const Tensor out = ops::embedding(table, ids(id_values, {2, 2}, DType::I32));
    EXPECT_EQ(out.shape(), (Shape{2, 2, 3}));
    EXPECT_EQ(out.dtype(), dtype);
    const std::vector<double> t = table.to_vector_f64();
    std::vector<double> want;
    for (int64_t id : id_values)
      want.insert(want.end(), t.begin() + id * 3, t.begin() + id * 3 + 3);
    EXPECT_EQ(out.to_vector_f64(), want);  // a copy: bit-exact
  }
}

TEST(OpsForward, CrossEntropyIsMeanNegLogSoftmax) {
  const Tensor logits = randn_tensor({4, 6}, 12, DType::F64, 0.0, 3.0);
  const std::vector<int64_t> targets = {5, -100, 0, 3};
  const std::vector<double> l = logits.to_vector_f64();
  const std::vector<double> logp = ref_softmax_rows(l, 6, true);
  double want = 0.0;
  int kept = 0;
  for (int i = 0; i < 4; ++i) {
    if (targets[i] == -100) continue;
    want -= logp[i * 6 + targets[i]];
    ++kept;
  }
  want /= kept;
  EXPECT_NEAR(ops::cross_entropy(logits, ids(targets, {4})).item(), want, 1e-13);
  EXPECT_NEAR(ops::cross_entropy(logits.to(DType::F32), ids(targets, {4})).item(), want, 1e-5);
  // Huge logits stay finite: losses 1000 − 0 and 500 − (−1000).
  const Tensor big = f64({1000, 0, -1000, 500}, {2, 2});
  EXPECT_NEAR(ops::cross_entropy(big, ids({1, 0}, {2})).item(), 0.5 * (1000.0 + 1500.0), 1e-9);
}

TEST(OpsForward, CrossEntropyAllIgnoredIsZeroWithZeroGrad) {
  Tensor logits = randn_tensor({3, 4}, 13);
  logits.set_requires_grad(true);
  const Tensor loss = ops::cross_entropy(logits, ids({-100, -100, -100}, {3}));
  EXPECT_EQ(loss.item(), 0.0);
  EXPECT_TRUE(std::isfinite(loss.item()));
  loss.backward();
  ASSERT_TRUE(logits.grad().defined());
  EXPECT_EQ(logits.grad().to_vector_f64(), std::vector<double>(12, 0.0));
}

// ---- reductions --------------------------------------------------------------------------------

TEST(OpsForward, ReductionValuesAndShapes) {
  const Tensor x = f64({1, 5, 2, -3, 0, 4}, {2, 3});
  EXPECT_TRUE(all_close(ops::sum(x, 1), {8, 1}, 0.0));
  EXPECT_TRUE(all_close(ops::sum(x, 0), {-2, 5, 6}, 0.0));
  EXPECT_TRUE(all_close(ops::mean(x, 1), {8.0 / 3, 1.0 / 3}, 1e-15));
  EXPECT_TRUE(all_close(ops::max(x, 0), {1, 5, 4}, 0.0));
  EXPECT_EQ(ops::argmax(x, 1).to_vector_i64(), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(ops::sum(x, 1).shape(), (Shape{2}));
  EXPECT_EQ(ops::sum(x, 1, true).shape(), (Shape{2, 1}));
  EXPECT_EQ(ops::max(x, -2, true).shape(), (Shape{1, 3}));
  EXPECT_EQ(ops::argmax(x, 0, true).dtype(), DType::I64);
  EXPECT_EQ(ops::sum_all(x).shape(), Shape{});
  EXPECT_EQ(ops::sum_all(x).item(), 9.0);
  EXPECT_DOUBLE_EQ(ops::mean_all(x).item(), 1.5);
  // Summing an empty dimension gives zeros.
  EXPECT_TRUE(all_close(ops::sum(Tensor::zeros({2, 0}, DType::F64), 1), {0, 0}, 0.0));
}

TEST(OpsForward, MaxArgmaxTiesPickFirstOccurrence) {
  const Tensor x = f64({1, 3, 3, 2, 7, 7, 7, 0}, {2, 4});
  EXPECT_EQ(ops::argmax(x, 1).to_vector_i64(), (std::vector<int64_t>{1, 0}));
  const Tensor col = f64({2, 9, 2, 9}, {4, 1});
  EXPECT_EQ(ops::argmax(col, 0).to_vector_i64(), (std::vector<int64_t>{1}));
  // The gradient of a tied max goes to the first position only.
  Tensor leaf = x.clone();
  leaf.set_requires_grad(true);
  ops::sum_all(ops::max(leaf, 1)).backward();
  EXPECT_EQ(leaf.grad().to_vector_f64(), (std::vector<double>{0, 1, 0, 0, 1, 0, 0, 0}));
}

// ---- concat, index_select ----------------------------------------------------------------------

TEST(OpsForward, ConcatValues) {
  const Tensor a = f64({1, 2, 3, 4}, {2, 2});
  const Tensor b = f64({5, 6}, {2, 1});
  const Tensor c = f64({7, 8, 9, 10, 11, 12}, {2, 3});
  const Tensor out = ops::concat({a, b, c}, 1);
  EXPECT_EQ(out.shape(), (Shape{2, 6}));
  EXPECT_EQ(out.to_vector_f64(), (std::vector<double>{1, 2, 5, 7, 8, 9, 3, 4, 6, 10, 11, 12}));
  EXPECT_EQ(ops::concat({a, a.transpose(0, 1)}, 0).to_vector_f64(),
            (std::vector<double>{1, 2, 3, 4, 1, 3, 2, 4}));
  // Integer tensors concatenate too.
  EXPECT_EQ(ops::concat({ids({1, 2}, {2}), ids({3}, {1})}, 0).to_vector_i64(),
            (std::vector<int64_t>{1, 2, 3}));
}

TEST(OpsForward, IndexSelectValues) {
  const Tensor x = f64({0, 1, 2, 10, 11, 12, 20, 21, 22, 30, 31, 32}, {4, 3});
  EXPECT_EQ(ops::index_select(x, 0, ids({3, 0, 3}, {3})).to_vector_f64(),
            (std::vector<double>{30, 31, 32, 0, 1, 2, 30, 31, 32}));
  EXPECT_EQ(ops::index_select(x, 1, ids({2, 2, 0}, {3}, DType::I32)).to_vector_f64(),
            (std::vector<double>{2, 2, 0, 12, 12, 10, 22, 22, 20, 32, 32, 30}));
  // A non-contiguous source.
  EXPECT_EQ(ops::index_select(x.transpose(0, 1), 1, ids({1}, {1})).to_vector_f64(),
            (std::vector<double>{10, 11, 12}));
  EXPECT_EQ(ops::index_select(x, 0, ids({}, {0})).shape(), (Shape{0, 3}));
}

// ---- BF16 ---------------------------------------------------------------------------------------

namespace {
// op on BF16 inputs gives BF16 values within bf16 rounding of op on the same values in F32.
void expect_bf16_close(const std::vector<Tensor>& inputs_f32,
                       const std::function<Tensor(const std::vector<Tensor>&)>& op, double tol) {
  std::vector<Tensor> bf16, widened;
  for (const Tensor& t : inputs_f32) {
    bf16.push_back(t.to(DType::BF16));
    widened.push_back(bf16.back().to(DType::F32));  // the exact values the BF16 run sees
  }
  const Tensor got = op(bf16);
  const Tensor want = op(widened);
  EXPECT_EQ(got.dtype(), DType::BF16);
  EXPECT_EQ(got.shape(), want.shape());
  EXPECT_TRUE(all_close(got, want.to_vector_f64(), tol, 4e-3));  // one bf16 ulp
}
}  // namespace

TEST(OpsForward, Bf16InputsGiveBf16OutputsNearF32) {
  const Tensor a = randn_tensor({3, 8}, 14, DType::F32);
  const Tensor b = randn_tensor({8}, 15, DType::F32);
  const Tensor w = randn_tensor({5, 8}, 16, DType::F32);
  expect_bf16_close(
      {a, b}, [](const auto& in) { return ops::add(in[0], in[1]); }, 1e-6);
  expect_bf16_close(
      {a, b}, [](const auto& in) { return ops::mul(in[0], in[1]); }, 1e-6);
  expect_bf16_close(
      {a}, [](const auto& in) { return ops::exp(in[0]); }, 1e-6);
  expect_bf16_close(
      {a}, [](const auto& in) { return ops::softmax(in[0], -1); }, 1e-6);
  expect_bf16_close(
      {a}, [](const auto& in) { return ops::log_softmax(in[0], 0); }, 1e-6);
  expect_bf16_close(
      {a, b}, [](const auto& in) { return ops::rms_norm(in[0], in[1], 1e-6); }, 1e-6);
  expect_bf16_close(
      {a}, [](const auto& in) { return ops::silu(in[0]); }, 1e-6);
  expect_bf16_close(
      {a, a}, [](const auto& in) { return ops::swiglu(in[0], in[1]); }, 1e-6);
  expect_bf16_close(
      {a}, [](const auto& in) { return ops::sum(in[0], 1); }, 1e-6);
  expect_bf16_close(
      {a}, [](const auto& in) { return ops::max(in[0], 0); }, 0.0);
  expect_bf16_close(
      {a, w}, [](const auto& in) { return ops::matmul(in[0], in[1], false, true); }, 1e-6);
  expect_bf16_close(
      {a, w}, [](const auto& in) { return ops::linear(in[0], in[1]); }, 1e-6);
  const Tensor x = randn_tensor({1, 2, 3, 8}, 17, DType::F32);
  const Tensor pos = ids({1, 2, 3}, {3});
  expect_bf16_close(
      {x}, [&](const auto& in) { return ops::rope(in[0], pos, ops::rope_inv_freq(8, 1e4)); }, 1e-6);
  expect_bf16_close(
      {x, x.narrow(1, 0, 1), x.narrow(1, 1, 1)},
      [](const auto& in) { return ops::attention(in[0], in[1], in[2]); }, 1e-6);
  // A BF16 cross-entropy loss is a BF16 scalar.
  const Tensor loss = ops::cross_entropy(a.to(DType::BF16), ids({0, 7, 3}, {3}));
  EXPECT_EQ(loss.dtype(), DType::BF16);
  EXPECT_NEAR(loss.item(),
              ops::cross_entropy(a.to(DType::BF16).to(DType::F32), ids({0, 7, 3}, {3})).item(),
              2e-2);
  // Asked for in F32, the same loss keeps the F32 value the kernel computed, and its
  // gradient reaches the BF16 logits in BF16.
  Tensor logits = a.to(DType::BF16);
  logits.set_requires_grad(true);
  const Tensor loss32 = ops::cross_entropy(logits, ids({0, 7, 3}, {3}), -100, DType::F32);
  EXPECT_EQ(loss32.dtype(), DType::F32);
  EXPECT_NEAR(loss32.item(),
              ops::cross_entropy(a.to(DType::BF16).to(DType::F32), ids({0, 7, 3}, {3})).item(),
              1e-6);
  loss32.backward();
  ASSERT_TRUE(logits.grad().defined());
  EXPECT_EQ(logits.grad().dtype(), DType::BF16);
  EXPECT_ERROR(ops::cross_entropy(a, ids({0, 7, 3}, {3}), -100, DType::I64), "cross_entropy",
               {"loss dtype"});
}

// rope_inv_freq follows Hugging Face's F32 sequence 1 / theta^(2i/D) with each step correctly
// rounded (the power evaluated here in long double). libm's powf, used before, was an ulp off
// in many elements (e.g. D=128, theta=1e6, i=37), which moves RoPE at large positions.
TEST(OpsForward, RopeInvFreqRoundsEachStepCorrectly) {
  for (const int64_t D : {64, 80, 128}) {
    for (const double theta : {1e4, 5e5, 1e6}) {
      const std::vector<float> got = ops::rope_inv_freq(D, theta).to_vector_f32();
      ASSERT_EQ(static_cast<int64_t>(got.size()), D / 2);
      for (int64_t i = 0; i < D / 2; ++i) {
        const float exponent = static_cast<float>(2 * i) / static_cast<float>(D);
        const float power = static_cast<float>(
            std::pow(static_cast<long double>(theta), static_cast<long double>(exponent)));
        EXPECT_EQ(got[i], 1.0f / power) << "D=" << D << " theta=" << theta << " i=" << i;
      }
    }
  }
}
