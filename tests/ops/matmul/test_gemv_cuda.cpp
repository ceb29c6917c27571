// ops::gemv_out on CUDA (label cuda) against the CPU reference gemv_out on the same values
// (F32 inputs; BF16 and F16 inputs widened exactly to F32 for the reference), on the
// Qwen2.5-0.5B decode shapes (split-K for the down projection) and small odd ones, every row
// count 1..8, with bias and with the SwiGLU epilogue; a row's bits alone equal its bits among
// 8 rows; the error paths of the CUDA kernel.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "core/expect_error.h"
#include "cuda/cuda_test_utils.h"
#include "microllm/core/random.h"
#include "microllm/ops/ops.h"
#include "ops/matmul/gemv_test_util.h"

using namespace microllm;
using microllm::testing::throws_error;
using microllm::testing::gemv::worst_error;

namespace {

const Device kGpu = Device::cuda(0);

Tensor host_randn(const Shape& shape, uint64_t seed, DType dtype) {
  Generator gen(seed);
  return randn(shape, gen, DType::F32, Device::cpu(), 0.0, 1.0).to(dtype);
}

Tensor abs_f32(const Tensor& t) { return microllm::testing::gemv::abs_values(t, DType::F32); }

struct Case {
  int64_t N, K;
  bool bias, swiglu;
};

}  // namespace

TEST(CudaGemv, MatchesTheCpuReference) {
  MICROLLM_REQUIRE_CUDA();
  const Case cases[] = {{1152, 896, true, false}, {896, 896, false, false},
                        {4864, 896, false, true}, {896, 4864, false, false},
                        {37, 64, true, false},    {5, 24, false, true}};
  for (DType dtype : microllm::testing::kCudaTestDtypes)
    for (const Case& c : cases)
      for (int64_t M = 1; M <= ops::kGemvMaxRows; ++M) {
        const int64_t rows = c.swiglu ? 2 * c.N : c.N;
        const Tensor x = host_randn({M, c.K}, 1 + static_cast<uint64_t>(M), dtype);
        const Tensor w = host_randn({rows, c.K}, 2, dtype);
        const Tensor b = c.bias ? host_randn({c.N}, 3, dtype) : Tensor();
        Tensor y = Tensor::empty({M, c.N}, dtype, kGpu);
        const ops::GemvEpilogue epi =
            c.swiglu ? ops::GemvEpilogue::swiglu : ops::GemvEpilogue::none;
        ops::gemv_out(x.to(kGpu), w.to(kGpu), c.bias ? b.to(kGpu) : Tensor(), y, epi);
        // The reference on the same (rounded) values in F32.
        Tensor want = Tensor::empty({M, c.N}, DType::F32);
        ops::gemv_out(x.to(DType::F32), w.to(DType::F32), c.bias ? b.to(DType::F32) : Tensor(),
                      want, epi);
        const Tensor got = y.to(Device::cpu()).to(DType::F32);
        const std::string where = std::string(dtype_name(dtype)) + " N " + std::to_string(c.N) +
                                  " K " + std::to_string(c.K) + " M " + std::to_string(M);
        const double rtol = dtype == DType::F32 ? 1e-5 : dtype == DType::BF16 ? 8e-3 : 1e-3;
        if (c.swiglu) {
          // y = silu(g)·u: the error of g and u (each bounded by rtol·Σ|x||w|) carried through
          // the product, plus the output's rounding.
          const Tensor wa = abs_f32(w);
          const std::vector<float> mag_g =
              ops::matmul(abs_f32(x), wa.narrow(0, 0, c.N).contiguous(), false, true)
                  .to_vector_f32();
          const std::vector<float> mag_u =
              ops::matmul(abs_f32(x), wa.narrow(0, c.N, c.N).contiguous(), false, true)
                  .to_vector_f32();
          const Tensor wf = w.to(DType::F32), xf = x.to(DType::F32);
          const std::vector<float> gv =
              ops::matmul(xf, wf.narrow(0, 0, c.N).contiguous(), false, true).to_vector_f32();
          const std::vector<float> uv =
              ops::matmul(xf, wf.narrow(0, c.N, c.N).contiguous(), false, true).to_vector_f32();
          const double eps = dtype == DType::F32 ? 6e-8 : dtype == DType::BF16 ? 4e-3 : 5e-4;
          const std::vector<float> g = got.to_vector_f32(), r = want.to_vector_f32();
          for (size_t i = 0; i < g.size(); ++i) {
            const double silu = gv[i] / (1.0 + std::exp(-static_cast<double>(gv[i])));
            const double bound =
                rtol * (mag_g[i] * (1.0 + std::fabs(uv[i])) + mag_u[i] * (1.0 + std::fabs(silu))) +
                4 * eps * std::fabs(r[i]);
            ASSERT_NEAR(g[i], r[i], bound) << where << " element " << i;
          }
        } else {
          const Tensor mag = ops::matmul(abs_f32(x), abs_f32(w), false, true);  // (M, N)
          // One rounding of the output to the dtype, plus F32 summation-order error.
          EXPECT_LT(worst_error(got, want, mag), rtol) << where;
        }
      }
}

TEST(CudaGemv, ARowGivesTheSameBitsAloneAndAmongEightRows) {
  MICROLLM_REQUIRE_CUDA();
  for (DType dtype : microllm::testing::kCudaTestDtypes)
    for (bool swiglu : {false, true}) {
      const int64_t N = swiglu ? 4864 : 896, K = swiglu ? 896 : 4864;  // swiglu: gate_up; down
      const Tensor x = host_randn({8, K}, 11, dtype).to(kGpu);
      const Tensor w = host_randn({swiglu ? 2 * N : N, K}, 12, dtype).to(kGpu);
      const ops::GemvEpilogue epi = swiglu ? ops::GemvEpilogue::swiglu : ops::GemvEpilogue::none;
      Tensor all = Tensor::empty({8, N}, dtype, kGpu);
      ops::gemv_out(x, w, Tensor(), all, epi);
      const Tensor all_host = all.to(Device::cpu());
      for (int64_t M : {1, 3, 5}) {
        Tensor some = Tensor::empty({M, N}, dtype, kGpu);
        ops::gemv_out(x.narrow(0, 8 - M, M), w, Tensor(), some, epi);  // the last M rows
        const Tensor got = some.to(Device::cpu()), want = all_host.narrow(0, 8 - M, M).contiguous();
        EXPECT_EQ(0, std::memcmp(got.raw_data(), want.raw_data(), got.nbytes()))
            << dtype_name(dtype) << " swiglu " << swiglu << " M " << M;
      }
    }
}

TEST(CudaGemv, RejectsWhatTheKernelDoesNotTake) {
  MICROLLM_REQUIRE_CUDA();
  const Tensor x = host_randn({2, 12}, 1, DType::BF16).to(kGpu);  // 12 BF16 = 24 bytes
  const Tensor w = host_randn({4, 12}, 2, DType::BF16).to(kGpu);
  EXPECT_TRUE(throws_error(
      [&] {
        ops::gemv_out(x, w, {}, Tensor::empty({2, 4}, DType::BF16, kGpu));
      },
      "gemv_out", {"multiple of 16 bytes"}));
  const Tensor x16 = host_randn({3, 17}, 3, DType::F32).to(kGpu);
  const Tensor w16 = host_randn({4, 16}, 4, DType::F32).to(kGpu);
  // A view starting 4 bytes into its storage is not 16-byte aligned.
  EXPECT_TRUE(throws_error(
      [&] {
        ops::gemv_out(x16.view({51}).narrow(0, 1, 48).view({3, 16}), w16, {},
                      Tensor::empty({3, 4}, DType::F32, kGpu));
      },
      "gemv_out", {"16-byte aligned"}));
  EXPECT_FALSE(ops::gemv_supported(kGpu, DType::F64, 1, 16));
  EXPECT_TRUE(ops::gemv_supported(kGpu, DType::BF16, 8, 896));
}
