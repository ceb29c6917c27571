// ops::rope_kv_write on CUDA (label cuda): the fused kernel gives, bit for bit, what the ops it
// replaces give on the same device — cast_out, rope_out with positions (N, 1) and kv_write —
// for F32 / BF16 / F16 inputs over F32 and BF16 caches, strided views of a fused projection
// and in place, with padding rows (slot −1) that write nothing, D 64 and 128, positions up
// to 30,000.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "cuda/cuda_test_utils.h"
#include "microllm/core/random.h"
#include "microllm/model/config.h"
#include "microllm/ops/ops.h"

using namespace microllm;

namespace {

const Device kGpu = Device::cuda(0);

bool same_bytes(const Tensor& a, const Tensor& b) {
  const Tensor ha = a.to(Device::cpu()).contiguous(), hb = b.to(Device::cpu()).contiguous();
  return ha.nbytes() == hb.nbytes() && std::memcmp(ha.raw_data(), hb.raw_data(), ha.nbytes()) == 0;
}

}  // namespace

TEST(CudaRopeKvWrite, EqualsCastRopeAndKvWriteBitForBit) {
  MICROLLM_REQUIRE_CUDA();
  for (int64_t D : {64, 128})
    for (DType dtype : microllm::testing::kCudaTestDtypes)
      for (DType cache_dtype : {DType::F32, DType::BF16})
        for (bool in_place : {false, true}) {
          const int64_t N = 7, H = 14, Hkv = 2, NB = 4, BS = 16;
          model::ModelConfig c;
          c.head_dim = D;
          c.rope_theta = 1000000.0;
          const Tensor inv_freq = model::rope_frequencies(c).to(kGpu);  // (D/2) F32
          Generator gen(static_cast<uint64_t>(D) + static_cast<uint64_t>(in_place));
          const Tensor qkv = randn({N, (H + 2 * Hkv) * D}, gen, DType::F32, Device::cpu(), 0.0, 1.0)
                                 .to(dtype)
                                 .to(kGpu);
          const Tensor q = qkv.narrow(1, 0, H * D).view({N, H, D});
          const Tensor k = qkv.narrow(1, H * D, Hkv * D).view({N, Hkv, D});
          const Tensor v = qkv.narrow(1, (H + Hkv) * D, Hkv * D).view({N, Hkv, D});
          const Tensor positions = Tensor::from_vector(
              std::vector<int64_t>{0, 1, 17, 511, 4095, 29999, 3}, {N}, DType::I32, kGpu);
          const Tensor slots = Tensor::from_vector(std::vector<int64_t>{5, -1, 0, 63, 17, -1, 40},
                                                   {N}, DType::I32, kGpu);
          // The reference: the unfused ops.
          Tensor q_ref = Tensor::empty({N, H, D}, dtype, kGpu),
                 k_ref = Tensor::empty({N, Hkv, D}, dtype, kGpu);
          Tensor kc_ref = Tensor::zeros({NB, BS, Hkv, D}, cache_dtype, kGpu),
                 vc_ref = Tensor::zeros({NB, BS, Hkv, D}, cache_dtype, kGpu);
          ops::cast_out(q, q_ref);
          ops::cast_out(k, k_ref);
          const Tensor pos = positions.view({N, 1});
          ops::rope_out(q_ref.view({N, H, 1, D}), pos, inv_freq, q_ref.view({N, H, 1, D}));
          ops::rope_out(k_ref.view({N, Hkv, 1, D}), pos, inv_freq, k_ref.view({N, Hkv, 1, D}));
          ops::kv_write(k_ref, v, slots, kc_ref, vc_ref);
          // The fused kernel.
          Tensor q_out = in_place ? q.contiguous() : Tensor::empty({N, H, D}, dtype, kGpu);
          Tensor k_out = in_place ? k.contiguous() : Tensor::empty({N, Hkv, D}, dtype, kGpu);
          Tensor kc = Tensor::zeros({NB, BS, Hkv, D}, cache_dtype, kGpu),
                 vc = Tensor::zeros({NB, BS, Hkv, D}, cache_dtype, kGpu);
          ops::rope_kv_write(in_place ? q_out : q, in_place ? k_out : k, v, positions, inv_freq,
                             slots, q_out, k_out, kc, vc);
          const std::string where = std::string(dtype_name(dtype)) + " cache " +
                                    std::string(dtype_name(cache_dtype)) + " D " +
                                    std::to_string(D) + (in_place ? " in place" : "");
          EXPECT_TRUE(same_bytes(q_out, q_ref)) << where;
          EXPECT_TRUE(same_bytes(k_out, k_ref)) << where;
          EXPECT_TRUE(same_bytes(kc, kc_ref)) << where;
          EXPECT_TRUE(same_bytes(vc, vc_ref)) << where;
        }
}
