// The wgmma flash kernels (Hopper only; skipped elsewhere). The forward called directly: its
// output against the CPU reference computed in F64 from the same BF16 values, its log-sum-exp
// against the mma.sync forward's (the statistic the backward reads), two runs bit for bit, and
// where it applies; the default (the wgmma forward at D 128 only). Through ops::attention with
// MICROLLM_FLASH_WGMMA=1 (forward, and at D 64 the dK/dV and dQ kernels): every gradient
// against the CPU reference at small and odd shapes, and against the mma.sync kernels at
// training shapes, bit for bit reproducible. The whole flash suite also runs through them with
// MICROLLM_FLASH_WGMMA=1 in the environment, and CTest reruns it with 0 (the mma.sync forward
// at D 128).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "cuda/cuda_test_utils.h"
#include "microllm/core/error.h"
#include "microllm/cuda/runtime.h"
#include "microllm/ops/ops.h"
#include "ops/attention/attention_kernels.h"
#include "support/scoped_env.h"

using namespace microllm;
using microllm::testing::bit_equal;
using microllm::testing::cuda_matches_cpu;
using microllm::testing::relative_l2;

namespace {

struct WgmmaCase {
  int64_t B, H, Hkv, T, S, D;
  bool causal;
};

std::string describe(const WgmmaCase& c) {
  std::ostringstream out;
  out << "B " << c.B << " H " << c.H << " Hkv " << c.Hkv << " T " << c.T << " S " << c.S << " D "
      << c.D << (c.causal ? " causal" : " full");
  return out.str();
}

ops::AttentionShape shape_of(const WgmmaCase& c) {
  return {c.B, c.H, c.Hkv, c.T, c.S, c.D, c.causal, 1.0 / std::sqrt(static_cast<double>(c.D))};
}

// A BF16 CUDA tensor of N(0, 1) samples.
Tensor device_bf16(const Shape& shape, uint64_t seed) {
  return microllm::testing::cuda_test_leaf(shape, seed)
      .detach()
      .to(DType::BF16)
      .to(Device::cuda(0));
}

bool hopper() {
  if (!cuda::is_available()) return false;
  const Tensor q = Tensor::zeros({1, 1, 1, 64}, DType::BF16, Device::cuda(0));
  return ops::flash_wgmma_forward_applies(shape_of({1, 1, 1, 1, 1, 64, true}), q, Tensor(),
                                          Tensor());
}

#define REQUIRE_HOPPER()                                                      \
  do {                                                                        \
    MICROLLM_REQUIRE_CUDA();                                                  \
    if (!hopper()) GTEST_SKIP() << "the wgmma forward needs an sm_90 device"; \
  } while (0)

struct Forward {
  Tensor out, lse;  // CUDA: (B, H, T, D) BF16, (B, H, T) F32
};

// MICROLLM_FLASH_WGMMA on or off for its lifetime.
microllm::testing::ScopedEnv wgmma_switch(bool on) {
  return microllm::testing::ScopedEnv("MICROLLM_FLASH_WGMMA", on ? "1" : "0");
}

// The wgmma forward called directly, or flash_attention_forward_cuda under `setting` of
// MICROLLM_FLASH_WGMMA ("0": the mma.sync forward at every D; null: the default).
Forward run(const WgmmaCase& c, const Tensor& q, const Tensor& k, const Tensor& v, bool wgmma,
            const char* setting = "0") {
  Forward f{Tensor::empty({c.B, c.H, c.T, c.D}, DType::BF16, Device::cuda(0)),
            Tensor::empty({c.B, c.H, c.T}, DType::F32, Device::cuda(0))};
  if (wgmma) {
    ops::flash_attention_forward_wgmma_cuda(shape_of(c), q, k, v, f.out, f.lse);
  } else {
    const microllm::testing::ScopedEnv use("MICROLLM_FLASH_WGMMA", setting);
    ops::flash_attention_forward_cuda(shape_of(c), q, k, v, Tensor(), Tensor(), f.out, f.lse);
  }
  return f;
}

ops::AttentionOptions flash(bool causal) {
  ops::AttentionOptions o;
  o.backend = ops::AttentionBackend::Flash;
  o.causal = causal;
  return o;
}

// Output and q, k, v gradients of one BF16 CUDA flash attention call, as CPU F32 tensors.
struct Gradients {
  Tensor out, dq, dk, dv;
};
Gradients run_with_gradients(const WgmmaCase& c, bool wgmma) {
  const auto use = wgmma_switch(wgmma);
  const auto device_leaf = [](const Shape& shape, uint64_t seed) {
    Tensor t = device_bf16(shape, seed);
    t.set_requires_grad(true);
    return t;
  };
  Tensor q = device_leaf({c.B, c.H, c.T, c.D}, 31), k = device_leaf({c.B, c.Hkv, c.S, c.D}, 32),
         v = device_leaf({c.B, c.Hkv, c.S, c.D}, 33);
  const Tensor out = ops::attention(q, k, v, flash(c.causal));
  out.backward(device_bf16({c.B, c.H, c.T, c.D}, 34));
  const auto host = [](const Tensor& t) { return t.to(Device::cpu()).to(DType::F32); };
  return {host(out), host(q.grad()), host(k.grad()), host(v.grad())};
}

Tensor host_f64(const Tensor& t) { return t.to(Device::cpu()).to(DType::F64); }

double max_abs_difference(const Tensor& a, const Tensor& b) {
  const std::vector<double> x = a.to_vector_f64(), y = b.to_vector_f64();
  double worst = 0.0;
  for (size_t i = 0; i < x.size(); ++i) worst = std::max(worst, std::abs(x[i] - y[i]));
  return worst;
}

}  // namespace

// Lengths around the 128-row blocks and key tiles (1, 63, 130, 257), T < S (queries at the
// end), GQA ratios 1, 2, 4, 7 and 8, both head dims, causal and full; then a training shape.
TEST(CudaFlashWgmma, MatchesTheCpuReferenceAndTheMmaForward) {
  REQUIRE_HOPPER();
  const std::vector<WgmmaCase> cases = {
      {1, 2, 2, 1, 1, 64, true},        {2, 4, 2, 63, 63, 64, true},
      {1, 14, 2, 130, 130, 64, true},   {1, 8, 1, 257, 257, 128, true},
      {2, 7, 1, 64, 200, 128, false},   {1, 4, 1, 33, 200, 64, true},
      {1, 16, 2, 5, 77, 128, true},     {1, 2, 1, 129, 129, 64, false},
      {2, 14, 2, 1024, 1024, 64, true}, {1, 16, 8, 640, 640, 128, true}};
  for (const WgmmaCase& c : cases) {
    const Tensor q = device_bf16({c.B, c.H, c.T, c.D}, 21),
                 k = device_bf16({c.B, c.Hkv, c.S, c.D}, 22),
                 v = device_bf16({c.B, c.Hkv, c.S, c.D}, 23);
    const Forward wgmma = run(c, q, k, v, true), mma = run(c, q, k, v, false);
    // BF16 output rounding and P rounded to BF16 before P · V, as in the mma.sync forward.
    // The F64 CPU reference for the small cases (the training shapes take the mma.sync
    // forward, itself tested against the CPU at small shapes, as their reference).
    if (c.B * c.H * c.T * c.S <= (int64_t{1} << 22)) {
      ops::AttentionOptions options;
      options.causal = c.causal;
      options.backend = ops::AttentionBackend::Reference;
      const Tensor reference = ops::attention(host_f64(q), host_f64(k), host_f64(v), options);
      EXPECT_LT(relative_l2(host_f64(wgmma.out), reference), 1e-2) << describe(c);
    }
    EXPECT_LT(relative_l2(host_f64(wgmma.out), host_f64(mma.out)), 1e-2) << describe(c);
    // Both log-sum-exps are F32 sums of exp2 terms of the same F32 scores in another order.
    EXPECT_LT(max_abs_difference(wgmma.lse, mma.lse), 1e-3) << describe(c);
    const Forward again = run(c, q, k, v, true);
    EXPECT_TRUE(bit_equal(again.out, wgmma.out)) << describe(c);
    EXPECT_TRUE(bit_equal(again.lse, wgmma.lse)) << describe(c);
  }
}

// Where it applies: bf16, D 64 or 128, default positions, 1 ≤ T ≤ S; the direct call refuses
// the rest with the expected shape in its message.
TEST(CudaFlashWgmma, AppliesOnlyWhereItComputesTheContract) {
  REQUIRE_HOPPER();
  const WgmmaCase c{1, 2, 1, 8, 8, 64, true};
  const Tensor q = device_bf16({1, 2, 8, 64}, 1), positions = Tensor::zeros({8}, DType::I64);
  EXPECT_TRUE(ops::flash_wgmma_forward_applies(shape_of(c), q, Tensor(), Tensor()));
  EXPECT_FALSE(ops::flash_wgmma_forward_applies(shape_of(c), q.to(DType::F16), Tensor(), Tensor()));
  EXPECT_FALSE(ops::flash_wgmma_forward_applies(shape_of(c), q, positions, positions));
  EXPECT_FALSE(
      ops::flash_wgmma_forward_applies(shape_of({1, 2, 1, 9, 8, 64, true}), q, Tensor(), Tensor()));
  EXPECT_FALSE(
      ops::flash_wgmma_forward_applies(shape_of({1, 2, 1, 0, 8, 64, true}), q, Tensor(), Tensor()));
  const Tensor k = device_bf16({1, 1, 8, 64}, 2);
  const WgmmaCase longer_queries{1, 2, 1, 9, 8, 64, true};
  const Tensor q9 = device_bf16({1, 2, 9, 64}, 3);
  try {
    run(longer_queries, q9, k, k, true);
    ADD_FAILURE() << "a query block longer than the keys was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("1 ≤ T ≤ S"), std::string::npos) << e.what();
  }
}

// With MICROLLM_FLASH_WGMMA unset the forward is the wgmma one at D 128 and the mma.sync one
// at D 64 (their bits); "1" takes the wgmma one at D 64 too.
TEST(CudaFlashWgmma, TheDefaultForwardIsWgmmaAtD128Only) {
  REQUIRE_HOPPER();
  for (const WgmmaCase& c :
       {WgmmaCase{1, 16, 8, 640, 640, 128, true}, WgmmaCase{2, 7, 1, 64, 200, 128, false},
        WgmmaCase{2, 14, 2, 1024, 1024, 64, true}}) {
    const Tensor q = device_bf16({c.B, c.H, c.T, c.D}, 41),
                 k = device_bf16({c.B, c.Hkv, c.S, c.D}, 42),
                 v = device_bf16({c.B, c.Hkv, c.S, c.D}, 43);
    const Forward wgmma = run(c, q, k, v, true), mma = run(c, q, k, v, false);
    const Forward by_default = run(c, q, k, v, false, nullptr), on = run(c, q, k, v, false, "1");
    const Forward& expected = c.D == 128 ? wgmma : mma;
    EXPECT_TRUE(bit_equal(by_default.out, expected.out)) << describe(c);
    EXPECT_TRUE(bit_equal(by_default.lse, expected.lse)) << describe(c);
    EXPECT_TRUE(bit_equal(on.out, wgmma.out)) << describe(c);
    EXPECT_TRUE(bit_equal(on.lse, wgmma.lse)) << describe(c);
  }
}

// Forward and every input gradient through the wgmma kernels against the CPU F32 reference:
// lengths around the 128-row blocks and 64-row tiles, T < S, GQA ratios 1 to 8 (parts of a
// group and whole groups a block), causal and full; D 128 takes the wgmma forward and the
// mma.sync backward.
TEST(CudaFlashWgmma, GradientsMatchTheCpuReference) {
  REQUIRE_HOPPER();
  const auto use = wgmma_switch(true);
  const std::vector<WgmmaCase> cases = {
      {1, 2, 2, 1, 1, 64, true},     {2, 4, 2, 63, 63, 64, true},    {1, 14, 2, 130, 130, 64, true},
      {1, 8, 1, 257, 257, 64, true}, {2, 7, 1, 64, 200, 64, false},  {1, 4, 1, 33, 200, 64, true},
      {1, 16, 2, 5, 77, 64, true},   {1, 2, 1, 129, 129, 64, false}, {1, 8, 2, 100, 300, 64, true},
      {1, 4, 2, 130, 130, 128, true}};
  for (const WgmmaCase& c : cases) {
    const auto fn = [&](const auto& x) {  // Auto: the CPU reference there, flash on CUDA
      ops::AttentionOptions o = flash(c.causal);
      o.backend = ops::AttentionBackend::Auto;
      return ops::attention(x[0], x[1], x[2], o);
    };
    EXPECT_TRUE(cuda_matches_cpu(fn,
                                 {microllm::testing::cuda_test_leaf({c.B, c.H, c.T, c.D}, 3),
                                  microllm::testing::cuda_test_leaf({c.B, c.Hkv, c.S, c.D}, 4),
                                  microllm::testing::cuda_test_leaf({c.B, c.Hkv, c.S, c.D}, 5)},
                                 microllm::testing::options_in(DType::BF16)))
        << describe(c);
  }
}

// At training shapes the wgmma kernels agree with the mma.sync kernels on the same BF16 values,
// and two runs give the same bits (no atomics; the group's parts summed in order).
TEST(CudaFlashWgmma, GradientsMatchTheMmaKernelsAtTrainingShapesAndAreReproducible) {
  REQUIRE_HOPPER();
  const std::vector<WgmmaCase> cases = {{2, 14, 2, 1024, 1024, 64, true},
                                        {1, 16, 8, 2048, 2048, 128, true},
                                        {4, 4, 2, 1000, 1500, 64, true}};
  for (const WgmmaCase& c : cases) {
    const Gradients wgmma = run_with_gradients(c, true), mma = run_with_gradients(c, false);
    EXPECT_LT(relative_l2(wgmma.out, mma.out), 1e-2) << describe(c);
    EXPECT_LT(relative_l2(wgmma.dq, mma.dq), 1e-2) << describe(c);
    EXPECT_LT(relative_l2(wgmma.dk, mma.dk), 1e-2) << describe(c);
    EXPECT_LT(relative_l2(wgmma.dv, mma.dv), 1e-2) << describe(c);
    const Gradients again = run_with_gradients(c, true);
    EXPECT_TRUE(bit_equal(again.out, wgmma.out)) << describe(c);
    EXPECT_TRUE(bit_equal(again.dq, wgmma.dq)) << describe(c);
    EXPECT_TRUE(bit_equal(again.dk, wgmma.dk)) << describe(c);
    EXPECT_TRUE(bit_equal(again.dv, wgmma.dv)) << describe(c);
  }
}
