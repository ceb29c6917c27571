// CUDA kv_write against the CPU reference op: the same cache bytes for every input dtype
// (f32, bf16, f16) into f32 and bf16 caches, padding rows writing nothing, strided views of a
// fused QKV buffer, and no allocation, copy or synchronization across the calls.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "core/expect_error.h"
#include "cuda/cuda_test_utils.h"
#include "microllm/core/random.h"
#include "microllm/cuda/allocator.h"
#include "microllm/ops/kv_write.h"

using namespace microllm;
using microllm::testing::throws_error;

namespace {

const Device kGpu = Device::cuda(0);

Tensor i32(const std::vector<int64_t>& values) {
  return Tensor::from_vector(values, {static_cast<int64_t>(values.size())}, DType::I32);
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  const Tensor x = a.to(Device::cpu()).contiguous(), y = b.to(Device::cpu()).contiguous();
  return x.dtype() == y.dtype() && x.shape() == y.shape() &&
         std::memcmp(x.raw_data(), y.raw_data(), x.nbytes()) == 0;
}

}  // namespace

TEST(CudaKvWrite, SameCacheBytesAsTheCpuForEveryDtype) {
  MICROLLM_REQUIRE_CUDA();
  const int64_t NB = 9, BS = 5, Hkv = 3, D = 128;
  // Slots in no order with padding rows; most slots stay unwritten.
  const std::vector<int64_t> slots = {44, 0, -1, 7, 23, 8, 9, -1, 31, 2, 40, 15, -1};
  const int64_t N = static_cast<int64_t>(slots.size());
  Generator gen(5);
  for (DType in : {DType::F32, DType::BF16, DType::F16})
    for (DType cache_dtype : {DType::F32, DType::BF16}) {
      // Large and tiny magnitudes too, so the BF16 rounding sees every exponent range.
      const Tensor k = randn({N, Hkv, D}, gen, DType::F32, Device::cpu(), 0.0, 300.0).to(in);
      const Tensor v = randn({N, Hkv, D}, gen, DType::F32, Device::cpu(), 0.0, 1e-3).to(in);
      const Tensor cpu_k = Tensor::full({NB, BS, Hkv, D}, NAN, cache_dtype);
      const Tensor cpu_v = randn({NB, BS, Hkv, D}, gen, cache_dtype);
      const Tensor gpu_k = cpu_k.to(kGpu), gpu_v = cpu_v.to(kGpu);
      ops::kv_write(k, v, i32(slots), cpu_k, cpu_v);
      ops::kv_write(k.to(kGpu), v.to(kGpu), i32(slots).to(kGpu), gpu_k, gpu_v);
      EXPECT_TRUE(same_bytes(gpu_k, cpu_k)) << in << " into " << cache_dtype;
      EXPECT_TRUE(same_bytes(gpu_v, cpu_v)) << in << " into " << cache_dtype;
    }
}

TEST(CudaKvWrite, StridedViewsOfAFusedQkvBufferWithoutAllocationsOrCopies) {
  MICROLLM_REQUIRE_CUDA();
  const int64_t N = 33, H = 14, Hkv = 2, D = 64, width = (H + 2 * Hkv) * D;
  Generator gen(7);
  const Tensor qkv_cpu = randn({N, width}, gen, DType::BF16);  // (N, (H + 2·Hkv)·D)
  const Tensor qkv = qkv_cpu.to(kGpu);
  std::vector<int64_t> slots;
  for (int64_t n = 0; n < N; ++n) slots.push_back(n % 4 == 3 ? -1 : (n * 7) % 48);
  const Tensor slots_cpu = i32(slots), slots_gpu = slots_cpu.to(kGpu);
  const auto k_of = [&](const Tensor& t) { return t.narrow(1, H * D, Hkv * D).view({N, Hkv, D}); };
  const auto v_of = [&](const Tensor& t) {
    return t.narrow(1, (H + Hkv) * D, Hkv * D).view({N, Hkv, D});
  };
  const Tensor cpu_k = Tensor::zeros({12, 4, Hkv, D}), cpu_v = Tensor::zeros({12, 4, Hkv, D});
  const Tensor gpu_k = cpu_k.to(kGpu), gpu_v = cpu_v.to(kGpu);
  ops::kv_write(k_of(qkv_cpu), v_of(qkv_cpu), slots_cpu, cpu_k, cpu_v);
  ops::kv_write(k_of(qkv), v_of(qkv), slots_gpu, gpu_k, gpu_v);  // warm-up
  const Tensor k = k_of(qkv), v = v_of(qkv);
  cuda::synchronize(cuda::current_stream(kGpu));
  const cuda::AllocatorStats before = cuda::allocator_stats(kGpu);
  cuda::reset_transfer_stats();
  for (int i = 0; i < 3; ++i) ops::kv_write(k, v, slots_gpu, gpu_k, gpu_v);
  const cuda::TransferStats t = cuda::transfer_stats();
  EXPECT_EQ(cuda::allocator_stats(kGpu).allocations, before.allocations);
  EXPECT_EQ(t.h2d_calls + t.d2h_calls + t.d2d_calls + t.host_synchronizations, 0);
  EXPECT_TRUE(same_bytes(gpu_k, cpu_k));
  EXPECT_TRUE(same_bytes(gpu_v, cpu_v));
}

TEST(CudaKvWrite, RejectsF64AndMixedDevices) {
  MICROLLM_REQUIRE_CUDA();
  const Tensor kc = Tensor::zeros({4, 2, 2, 8}, DType::F32, kGpu);
  const Tensor vc = Tensor::zeros({4, 2, 2, 8}, DType::F32, kGpu);
  const Tensor k64 = Tensor::zeros({3, 2, 8}, DType::F64, kGpu);
  const Tensor slots = i32({0, 1, 2}).to(kGpu);
  EXPECT_TRUE(throws_error([&] { ops::kv_write(k64, k64, slots, kc, vc); }, "kv_write",
                           {"CUDA kernels take f32, bf16 or f16"}));
  const Tensor k = Tensor::zeros({3, 2, 8});
  EXPECT_TRUE(throws_error([&] { ops::kv_write(k, k, slots, kc, vc); }, "kv_write",
                           {"are on different devices"}));
  const Tensor kg = k.to(kGpu);
  EXPECT_TRUE(throws_error(
      [&] {
        ops::kv_write(kg, kg, i32({0, 1, 2}), kc, vc);
      },
      "kv_write", {"'slot_mapping'", "is not on the device of the KV cache"}));
}
