// CPU forward values of rope (rotate-half) and rope_inv_freq against references written
// here (double; long double for each correctly rounded F32 frequency step): positions (T)
// and (B, T), I32 and I64, position 0 as the identity; and the error paths: odd head dim,
// bad theta, positions of the wrong shape or dtype, wrong rank, a wrong inv_freq.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "microllm/ops/ops.h"
#include "ops/op_test_util.h"

using namespace microllm;
using microllm::testing::optest::all_close;
using microllm::testing::optest::f64;
using microllm::testing::optest::ids;
using microllm::testing::optest::randn_tensor;

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

// ---- forward ---------------------------------------------------------------------------------

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

// ---- bad input -------------------------------------------------------------------------------

// A transposed (B, T, H, D) projection is read in place: the same values and gradient as
// its dense copy, and the gradient comes back laid out like the projection, so the transpose
// back is dense (the Transformer's reshape then needs no copy).
TEST(OpsForward, RopeReadsATransposedViewAndReturnsItsGradientInItsLayout) {
  for (DType dtype : {DType::F32, DType::F64, DType::BF16}) {
    SCOPED_TRACE(::testing::Message() << dtype);
    const Tensor projection = randn_tensor({2, 5, 3, 8}, 31, dtype);  // (B, T, H, D)
    const Tensor dy = randn_tensor({2, 3, 5, 8}, 32, dtype);          // (B, H, T, D)
    const Tensor positions = ids({4, 5, 6, 7, 8}, {5});
    const Tensor inv_freq = ops::rope_inv_freq(8, 10000.0);
    Tensor strided = projection.clone();
    strided.set_requires_grad(true);
    Tensor dense = projection.transpose(1, 2).contiguous();
    dense.set_requires_grad(true);
    const Tensor y_strided = ops::rope(strided.transpose(1, 2), positions, inv_freq);
    const Tensor y_dense = ops::rope(dense, positions, inv_freq);
    EXPECT_EQ(y_strided.to_vector_f64(), y_dense.to_vector_f64());
    y_strided.backward(dy);
    y_dense.backward(dy);
    EXPECT_EQ(strided.grad().to_vector_f64(),
              dense.grad().transpose(1, 2).contiguous().to_vector_f64());
    if (dtype != DType::BF16)  // (BF16 grads are converted back from the F32 kernel's)
      EXPECT_TRUE(strided.grad().is_contiguous()) << strided.grad().describe();
  }
}

namespace {
// Zero tensors of a shape, for the error cases.
Tensor f32(const Shape& shape) { return Tensor::zeros(shape, DType::F32); }
Tensor i64(const Shape& shape) { return Tensor::zeros(shape, DType::I64); }
}  // namespace

TEST(BadInput, Rope) {
  const Tensor freq2 = f32({2});
  EXPECT_ERROR(ops::rope(f32({1, 1, 2, 3}), ids({0, 1}, {2}), f32({1})), "rope",
               {"even", "f32(1, 1, 2, 3)"});
  EXPECT_ERROR(ops::rope_inv_freq(3, 10000.0), "rope_inv_freq", {"even", "3"});
  EXPECT_ERROR(ops::rope_inv_freq(0, 10000.0), "rope_inv_freq", {"0"});
  EXPECT_ERROR(ops::rope_inv_freq(4, -1.0), "rope_inv_freq", {"theta", "-1"});
  // positions must be (T) or (B, T).
  EXPECT_ERROR(ops::rope(f32({2, 1, 3, 4}), ids({0, 1, 2, 3}, {4}), freq2), "rope",
               {"positions", "f32(2, 1, 3, 4)", "i64(4,)"});
  EXPECT_ERROR(ops::rope(f32({2, 1, 3, 4}), i64({3, 3}), freq2), "rope",
               {"positions", "i64(3, 3)"});
  EXPECT_ERROR(ops::rope(f32({2, 1, 3, 4}), i64({1, 2, 3}), freq2), "rope",
               {"positions", "i64(1, 2, 3)"});
  EXPECT_ERROR(ops::rope(f32({2, 1, 3, 4}), f32({3}), freq2), "rope", {"'positions'", "f32(3,)"});
  EXPECT_ERROR(ops::rope(f32({1, 3, 4}), i64({3}), freq2), "rope", {"rank 4", "f32(1, 3, 4)"});
  EXPECT_ERROR(ops::rope(f32({1, 1, 3, 4}), i64({3}), f32({3})), "rope",
               {"inv_freq", "(2)", "f32(3,)"});
  EXPECT_ERROR(ops::rope(i64({1, 1, 3, 4}), i64({3}), freq2), "rope", {"'x'", "i64(1, 1, 3, 4)"});
  // rope_out reads strided rows, but each row of D must be contiguous.
  EXPECT_ERROR(ops::rope_out(f32({1, 1, 4, 3}).transpose(2, 3), i64({3}), freq2, f32({1, 1, 3, 4})),
               "rope_out", {"unit stride along D", "(12, 12, 1, 3)"});
}
