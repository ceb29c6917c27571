// The allocation-free `_out` forms on CUDA (F32 and BF16): each equal bit for bit to its
// autograd operator on the same device, and, once warm, a run of every `_out` form makes no
// device allocation (cuda::allocator_stats) and no copy or host synchronization
// (cuda::transfer_stats) — embedding_out reads no ids back.
#include <gtest/gtest.h>

#include <cstring>
#include <numeric>

#include "cuda/cuda_test_utils.h"
#include "microllm/core/random.h"
#include "microllm/cuda/allocator.h"
#include "microllm/cuda/runtime.h"
#include "microllm/ops/ops.h"

using namespace microllm;
using microllm::testing::bit_equal;

namespace {

const Device kGpu = Device::cuda(0);

// N(mean, std²) samples made on the CPU in F32, then rounded to `dtype` on the GPU.
Tensor gpu_randn(const Shape& shape, uint64_t seed, DType dtype, double mean = 0.0,
                 double std = 1.0) {
  Generator gen(seed);
  return randn(shape, gen, DType::F32, Device::cpu(), mean, std).to(dtype).to(kGpu);
}

Tensor gpu_ids(const std::vector<int64_t>& values, const Shape& shape, DType dtype) {
  return Tensor::from_vector(values, shape, dtype, kGpu);
}

// The operands of one decode-sized step in `dtype`, and its preallocated outputs.
struct Step {
  static constexpr int64_t N = 3, C = 72, F = 100, V = 61, H = 2, D = 16;
  DType dtype;
  Tensor table, ids, x, residual, norm_w, sum, normed, w_up, bias, up, gate, act, act2;
  Tensor q, positions, freq, q_rot, half, big_w, big_x, big_y;

  explicit Step(DType dt) : dtype(dt) {
    table = gpu_randn({V, C}, 1, dt);
    ids = gpu_ids({5, 60, 0}, {N}, DType::I32);
    x = gpu_randn({N, C}, 2, dt);
    residual = gpu_randn({N, C}, 3, dt);
    norm_w = gpu_randn({C}, 4, dt, 1.0, 0.5);
    w_up = gpu_randn({2 * F, C}, 5, dt, 0.0, 0.1);
    bias = gpu_randn({2 * F}, 6, dt);
    q = gpu_randn({1, H, N, D}, 7, dt);
    positions = gpu_ids({9, 10, 11}, {N}, DType::I32);
    freq = ops::rope_inv_freq(D, 1e6).to(kGpu);
    big_w = gpu_randn({896, 896}, 8, dt, 0.0, 0.05);
    big_x = gpu_randn({1, 896}, 9, dt);
    for (Tensor* t : {&sum, &normed}) *t = Tensor::empty({N, C}, dt, kGpu);
    up = Tensor::empty({N, 2 * F}, dt, kGpu);
    for (Tensor* t : {&gate, &act, &act2}) *t = Tensor::empty({N, F}, dt, kGpu);
    q_rot = Tensor::empty({1, H, N, D}, dt, kGpu);
    half = Tensor::empty({N, C}, dt == DType::F32 ? DType::BF16 : DType::F32, kGpu);
    big_y = Tensor::empty({1, 896}, dt, kGpu);
  }

  // Every `_out` form once, none in place, so each run writes the same values.
  void run() const {
    ops::embedding_out(table, ids, sum);
    ops::rms_norm_out(x, norm_w, 1e-6, normed);
    ops::add_rms_norm_out(x, residual, norm_w, 1e-6, sum, normed);
    ops::linear_out(normed, w_up, bias, up);
    ops::linear_out(big_x, big_w, Tensor(), big_y);
    ops::add_out(up.narrow(1, 0, F), up.narrow(1, F, F), gate);  // strided operands
    ops::silu_out(gate, act);
    ops::swiglu_out(gate, act, act2);
    ops::rope_out(q, positions, freq, q_rot);
    ops::cast_out(x, half);
  }
};

}  // namespace

TEST(CudaOutForms, MatchTheOperatorsBitForBit) {
  MICROLLM_REQUIRE_CUDA();
  for (DType dtype : microllm::testing::kCudaTestDtypes) {
    const Step s(dtype);
    s.run();
    EXPECT_TRUE(bit_equal(s.q_rot, ops::rope(s.q, s.positions, s.freq))) << dtype;
    EXPECT_TRUE(bit_equal(s.up, ops::linear(s.normed, s.w_up, s.bias))) << dtype;
    EXPECT_TRUE(bit_equal(s.big_y, ops::linear(s.big_x, s.big_w))) << dtype;
    const Tensor gate_want = ops::add(s.up.narrow(1, 0, Step::F), s.up.narrow(1, Step::F, Step::F));
    EXPECT_TRUE(bit_equal(s.gate, gate_want)) << dtype;
    EXPECT_TRUE(bit_equal(s.act, ops::silu(s.gate))) << dtype;
    EXPECT_TRUE(bit_equal(s.act2, ops::swiglu(s.gate, s.act))) << dtype;
    EXPECT_TRUE(bit_equal(s.half, ops::cast(s.x, s.half.dtype()))) << dtype;
    const ops::AddRmsNormResult fused = ops::add_rms_norm(s.x, s.residual, s.norm_w, 1e-6);
    EXPECT_TRUE(bit_equal(s.sum, fused.sum)) << dtype;
    EXPECT_TRUE(bit_equal(s.normed, fused.normed)) << dtype;
    // add_rms_norm_out overwrote what embedding_out and rms_norm_out wrote: check them alone.
    const Tensor rows = Tensor::empty({Step::N, Step::C}, dtype, kGpu);
    ops::embedding_out(s.table, s.ids, rows);
    EXPECT_TRUE(bit_equal(rows, ops::embedding(s.table, s.ids))) << dtype;
    ops::rms_norm_out(s.x, s.norm_w, 1e-6, rows);
    EXPECT_TRUE(bit_equal(rows, ops::rms_norm(s.x, s.norm_w, 1e-6))) << dtype;
    // In place: the residual stream and RoPE.
    const Tensor residual = s.residual.clone(), q = s.q.clone();
    ops::add_rms_norm_out(s.x, residual, s.norm_w, 1e-6, residual, rows);
    EXPECT_TRUE(bit_equal(residual, fused.sum)) << dtype;
    EXPECT_TRUE(bit_equal(rows, fused.normed)) << dtype;
    ops::rope_out(q, s.positions, s.freq, q);
    EXPECT_TRUE(bit_equal(q, ops::rope(s.q, s.positions, s.freq))) << dtype;
  }
}

TEST(CudaOutForms, AllocateNothingAndCopyNothingOnceWarm) {
  MICROLLM_REQUIRE_CUDA();
  for (DType dtype : microllm::testing::kCudaTestDtypes) {
    const Step s(dtype);
    s.run();  // warm-up: cuBLASLt algorithm cache and workspace, stream creation
    cuda::synchronize(cuda::current_stream(kGpu));
    const cuda::AllocatorStats before = cuda::allocator_stats(kGpu);
    const cuda::TransferStats copies_before = cuda::transfer_stats();
    for (int i = 0; i < 3; ++i) s.run();
    const cuda::AllocatorStats after = cuda::allocator_stats(kGpu);
    const cuda::TransferStats copies_after = cuda::transfer_stats();
    EXPECT_EQ(after.allocations, before.allocations) << dtype;
    EXPECT_EQ(after.backend_mallocs, before.backend_mallocs) << dtype;
    EXPECT_EQ(after.allocated_bytes, before.allocated_bytes) << dtype;
    EXPECT_EQ(copies_after.h2d_calls, copies_before.h2d_calls) << dtype;
    EXPECT_EQ(copies_after.d2h_calls, copies_before.d2h_calls) << dtype;
    EXPECT_EQ(copies_after.d2d_calls, copies_before.d2d_calls) << dtype;
    EXPECT_EQ(copies_after.host_synchronizations, copies_before.host_synchronizations) << dtype;
    // The counters do see what the autograd embedding does: it reads its ids back.
    const Tensor rows = ops::embedding(s.table, s.ids);
    EXPECT_EQ(rows.size(0), Step::N);
    EXPECT_GT(cuda::allocator_stats(kGpu).allocations, after.allocations) << dtype;
    EXPECT_GT(cuda::transfer_stats().d2h_calls, copies_after.d2h_calls) << dtype;
  }
}
