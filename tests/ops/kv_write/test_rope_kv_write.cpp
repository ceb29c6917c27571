// ops::rope_kv_write on the CPU, where it runs the ops it fuses: an in-place call (q_out = q,
// k_out = k) gives the values of an out-of-place one from strided views of a fused
// projection, the cache receives k_out and v at the slots (−1 writes nothing), and the
// error paths name what they expected.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/expect_error.h"
#include "microllm/ops/ops.h"
#include "ops/op_test_util.h"

using namespace microllm;
using microllm::testing::throws_error;
using microllm::testing::optest::randn_tensor;

namespace {

constexpr int64_t N = 5, H = 4, Hkv = 2, D = 8, NB = 3, BS = 4;

Tensor inv_freq() {
  std::vector<float> f(D / 2);
  for (int64_t i = 0; i < D / 2; ++i) f[i] = std::pow(10000.0f, -2.0f * i / D);
  return Tensor::from_vector(f, {D / 2}, DType::F32);
}

}  // namespace

TEST(RopeKvWrite, InPlaceEqualsOutOfPlaceAndFillsTheCache) {
  const Tensor qkv = randn_tensor({N, (H + 2 * Hkv) * D}, 1, DType::F32);  // fused projection
  const Tensor q = qkv.narrow(1, 0, H * D).view({N, H, D});
  const Tensor k = qkv.narrow(1, H * D, Hkv * D).view({N, Hkv, D});
  const Tensor v = qkv.narrow(1, (H + Hkv) * D, Hkv * D).view({N, Hkv, D});
  const Tensor positions =
      Tensor::from_vector(std::vector<int64_t>{0, 7, 3, 100, 5}, {N}, DType::I32);
  const Tensor slots = Tensor::from_vector(std::vector<int64_t>{2, -1, 0, 11, 6}, {N}, DType::I32);
  Tensor q_out = Tensor::empty({N, H, D}, DType::F32),
         k_out = Tensor::empty({N, Hkv, D}, DType::F32);
  Tensor kc = Tensor::zeros({NB, BS, Hkv, D}, DType::F32),
         vc = Tensor::zeros({NB, BS, Hkv, D}, DType::F32);
  ops::rope_kv_write(q, k, v, positions, inv_freq(), slots, q_out, k_out, kc, vc);
  // In place on dense copies.
  Tensor q2 = q.contiguous(), k2 = k.contiguous();
  Tensor kc2 = Tensor::zeros({NB, BS, Hkv, D}, DType::F32),
         vc2 = Tensor::zeros({NB, BS, Hkv, D}, DType::F32);
  ops::rope_kv_write(q2, k2, v, positions, inv_freq(), slots, q2, k2, kc2, vc2);
  EXPECT_EQ(q2.to_vector_f32(), q_out.to_vector_f32());
  EXPECT_EQ(k2.to_vector_f32(), k_out.to_vector_f32());
  EXPECT_EQ(kc2.to_vector_f32(), kc.to_vector_f32());
  EXPECT_EQ(vc2.to_vector_f32(), vc.to_vector_f32());
  // Row 0 sits at position 0: RoPE leaves it unchanged.
  EXPECT_EQ(q_out.narrow(0, 0, 1).contiguous().to_vector_f32(),
            q.narrow(0, 0, 1).contiguous().to_vector_f32());
  // The cache holds k_out and v at each row's slot; row 1 (slot −1) wrote nothing.
  const std::vector<float> kcv = kc.to_vector_f32(), vcv = vc.to_vector_f32(),
                           ko = k_out.to_vector_f32(), vv = v.contiguous().to_vector_f32();
  const int32_t slot_of[N] = {2, -1, 0, 11, 6};
  std::vector<bool> written(NB * BS, false);
  for (int64_t n = 0; n < N; ++n) {
    if (slot_of[n] < 0) continue;
    written[static_cast<size_t>(slot_of[n])] = true;
    for (int64_t e = 0; e < Hkv * D; ++e) {
      EXPECT_EQ(kcv[slot_of[n] * Hkv * D + e], ko[n * Hkv * D + e]) << n << " " << e;
      EXPECT_EQ(vcv[slot_of[n] * Hkv * D + e], vv[n * Hkv * D + e]) << n << " " << e;
    }
  }
  for (int64_t s = 0; s < NB * BS; ++s)
    if (!written[static_cast<size_t>(s)])
      for (int64_t e = 0; e < Hkv * D; ++e) EXPECT_EQ(kcv[s * Hkv * D + e], 0.0f) << s;
}

TEST(RopeKvWrite, RejectsMismatchedShapesAndOverlaps) {
  const Tensor q = randn_tensor({N, H, D}, 2, DType::F32),
               k = randn_tensor({N, Hkv, D}, 3, DType::F32),
               v = randn_tensor({N, Hkv, D}, 4, DType::F32);
  const Tensor pos = Tensor::zeros({N}, DType::I32), slots = Tensor::zeros({N}, DType::I32);
  const Tensor kc = Tensor::zeros({NB, BS, Hkv, D}, DType::F32),
               vc = Tensor::zeros({NB, BS, Hkv, D}, DType::F32);
  const Tensor q_out = Tensor::empty({N, H, D}, DType::F32),
               k_out = Tensor::empty({N, Hkv, D}, DType::F32);
  EXPECT_TRUE(throws_error(
      [&] {
        ops::rope_kv_write(q, randn_tensor({N, 3, D}, 5, DType::F32), v, pos, inv_freq(), slots,
                           q_out, k_out, kc, vc);
      },
      "rope_kv_write", {"expected q (N, H, D), k, v (N, Hkv, D)"}));
  EXPECT_TRUE(throws_error(
      [&] {
        ops::rope_kv_write(q, k, v, Tensor::zeros({N - 1}, DType::I32), inv_freq(), slots, q_out,
                           k_out, kc, vc);
      },
      "rope_kv_write", {"positions and slot_mapping must be (N)"}));
  EXPECT_TRUE(throws_error(
      [&] {
        ops::rope_kv_write(q, k, v, pos, inv_freq(), slots, Tensor::empty({N, H, D}, DType::F64),
                           k_out, kc, vc);
      },
      "rope_kv_write", {"q_out"}));
  // k_out written over v would corrupt the values before they reach the cache.
  EXPECT_TRUE(
      throws_error([&] { ops::rope_kv_write(q, k, v, pos, inv_freq(), slots, q_out, v, kc, vc); },
                   "rope_kv_write", {"overlaps"}));
}
