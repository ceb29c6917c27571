// ops::gemv_out on CUDA (label cuda) against the CPU reference gemv_out on the same values
// (F32 inputs; BF16 and F16 inputs widened exactly to F32 for the reference), on the
// Qwen2.5-0.5B decode shapes (split-K for the down projection) and small odd ones, every row
// count 1..8 (1–4 on the CUDA-core kernel, 5–8 of BF16/F16 on the tensor-core one), with bias
// and with the SwiGLU epilogue, and a K whose 8 rows of x do not fit in shared memory (read
// from global memory, where fewer rows are staged); a row's bits alone equal its bits among
// up to 4 rows, and among 5..8 rows equal its bits among 8; the fused norm prologue and residual
// epilogue give the bits of rms_norm_out, gemv_out and add_out run one after another (RMSNorm
// widths whose norm block has 32 to 1,024 threads, in place and not), and the rope_kv_write
// epilogue those of gemv_out and rope_kv_write (D 64 and 128, f32 and bf16 caches, a padding slot);
// with the early inputs (GemvFusion::early_inputs, MICROLLM_GEMV_EARLY_INPUTS=1) the fused calls
// give the same bits; the error paths. CTest runs this suite again with
// MICROLLM_GEMV_CLUSTER_SPLIT=1 (CudaGemvClusterSplit), where the tensor-core kernel splits K over
// thread-block clusters.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "core/expect_error.h"
#include "cuda/cuda_test_utils.h"
#include "microllm/core/random.h"
#include "microllm/ops/ops.h"
#include "ops/matmul/gemv_test_util.h"
#include "ops/op_test_util.h"
#include "support/scoped_env.h"

using namespace microllm;
using microllm::testing::throws_error;
using microllm::testing::gemv::worst_error;
using microllm::testing::optest::same_bits;

namespace {

const Device kGpu = Device::cuda(0);
// Both kernels' dtypes: F32 (CUDA cores only), BF16 and F16 (tensor cores from 5 rows).
const auto& kGemvDtypes = microllm::testing::kCudaFloatDtypes;

Tensor host_randn(const Shape& shape, uint64_t seed, DType dtype) {
  Generator gen(seed);
  return randn(shape, gen, DType::F32, Device::cpu(), 0.0, 1.0).to(dtype);
}

Tensor abs_f32(const Tensor& t) { return microllm::testing::gemv::abs_values(t, DType::F32); }

// gemv_out with the environment switch `name` set to `value` for the call.
void gemv_with_switch(const char* name, const char* value, const Tensor& x, const Tensor& w,
                      const Tensor& b, const Tensor& out, const ops::GemvFusion& fusion) {
  const microllm::testing::ScopedEnv env(name, value);
  ops::gemv_out(x, w, b, out, fusion);
}

struct Case {
  int64_t N, K;
  bool bias, swiglu;
};

}  // namespace

TEST(CudaGemv, MatchesTheCpuReference) {
  MICROLLM_REQUIRE_CUDA();
  // 16,384 rows: enough tiles that neither kernel splits K. K 16,384: from some M on, x's rows
  // no longer fit in shared memory beside the kernel's other bytes and are read from global
  // memory instead of being staged.
  const Case cases[] = {{1152, 896, true, false},   {896, 896, false, false},
                        {4864, 896, false, true},   {896, 4864, false, false},
                        {16384, 896, false, false}, {37, 64, true, false},
                        {5, 24, false, true},       {64, 16384, false, false}};
  for (DType dtype : kGemvDtypes)
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

// The tensor-core kernel's second pass of W staged in shared memory before the wait (the
// default where it applies: the 0.5B gate/up and down shapes, one tile a warp and two passes)
// gives the bits of the register loads (MICROLLM_GEMV_STAGE_W=0).
TEST(CudaGemv, StagedWeightsGiveTheRegisterLoadsBits) {
  MICROLLM_REQUIRE_CUDA();
  const Case shapes[] = {{4864, 896, false, true}, {896, 4864, false, false}};
  for (DType dtype : {DType::BF16, DType::F16})
    for (const Case& c : shapes) {
      const Tensor w = host_randn({c.swiglu ? 2 * c.N : c.N, c.K}, 11, dtype).to(kGpu);
      const Tensor b = c.bias ? host_randn({c.N}, 12, dtype).to(kGpu) : Tensor();
      ops::GemvFusion fusion;
      fusion.epilogue = c.swiglu ? ops::GemvEpilogue::swiglu : ops::GemvEpilogue::none;
      for (int64_t M = 5; M <= ops::kGemvMaxRows; ++M) {
        const Tensor x = host_randn({M, c.K}, 10 + static_cast<uint64_t>(M), dtype).to(kGpu);
        Tensor want = Tensor::empty({M, c.N}, dtype, kGpu), got = want.clone();
        gemv_with_switch("MICROLLM_GEMV_STAGE_W", "0", x, w, b, want, fusion);
        gemv_with_switch("MICROLLM_GEMV_STAGE_W", "1", x, w, b, got, fusion);
        EXPECT_TRUE(same_bits(got.to(Device::cpu()), want.to(Device::cpu())))
            << dtype_name(dtype) << " N " << c.N << " K " << c.K << " M " << M;
      }
    }
}

// Within each kernel's range of rows (1–4 and 5–8; F32 1–8 on the CUDA cores); a call of
// fewer rows with kernel_rows = 8 takes the 8-row call's kernel and gives its bits.
TEST(CudaGemv, ARowGivesTheSameBitsAloneAndAmongTheRowsOfItsKernel) {
  MICROLLM_REQUIRE_CUDA();
  struct Part {
    int64_t rows, kernel_rows;
  };
  struct Range {
    int64_t R;                // rows of the full call
    std::vector<Part> parts;  // calls on its last rows
  };
  struct Product {
    bool swiglu;
    int64_t N, K;
  };
  // The down and gate/up projections, and a K whose 8 rows of x are read from global memory
  // where fewer rows are staged in shared memory.
  const Product products[] = {{false, 896, 4864}, {true, 4864, 896}, {false, 64, 16384}};
  for (DType dtype : kGemvDtypes)
    for (const auto& [swiglu, N, K] : products)
      for (const Range& range :
           {Range{4, {{1, 0}, {3, 0}}}, dtype == DType::F32
                                            ? Range{8, {{1, 0}, {5, 0}, {7, 0}}}
                                            : Range{8, {{5, 0}, {6, 0}, {7, 0}, {2, 8}, {4, 6}}}}) {
        const int64_t R = range.R;
        const Tensor x = host_randn({R, K}, 11, dtype).to(kGpu);
        const Tensor w = host_randn({swiglu ? 2 * N : N, K}, 12, dtype).to(kGpu);
        const ops::GemvEpilogue epi = swiglu ? ops::GemvEpilogue::swiglu : ops::GemvEpilogue::none;
        Tensor all = Tensor::empty({R, N}, dtype, kGpu);
        ops::gemv_out(x, w, Tensor(), all, epi);
        const Tensor all_host = all.to(Device::cpu());
        for (const Part& part : range.parts) {
          const int64_t M = part.rows;
          ops::GemvFusion f;
          f.epilogue = epi;
          f.kernel_rows = part.kernel_rows;
          Tensor some = Tensor::empty({M, N}, dtype, kGpu);
          ops::gemv_out(x.narrow(0, R - M, M), w, Tensor(), some, f);  // the last M rows
          const Tensor got = some.to(Device::cpu()),
                       want = all_host.narrow(0, R - M, M).contiguous();
          EXPECT_EQ(0, std::memcmp(got.raw_data(), want.raw_data(), got.nbytes()))
              << dtype_name(dtype) << " swiglu " << swiglu << " K " << K << " M " << M
              << " kernel_rows " << part.kernel_rows;
        }
      }
}

TEST(CudaGemv, FusedNormAndResidualGiveTheBitsOfTheSeparateOperators) {
  MICROLLM_REQUIRE_CUDA();
  struct FusedCase {
    int64_t N, K;
    bool bias, swiglu, norm, residual;
  };
  // Qwen2.5-0.5B (C 896: a 128-thread norm), 1.5B (C 1536: 192), a 3,072-wide row (384
  // threads: the kernel's 256 play two each) and an 8,192-wide one (1,024), small odd ones;
  // at 5 BF16 rows of 4,096 the normalized rows and the split-K sums of the tensor-core
  // kernel need more than 48 KB of shared memory.
  const FusedCase cases[] = {
      {1152, 896, true, false, true, false},  {896, 896, false, false, false, true},
      {4864, 896, false, true, true, false},  {896, 4864, false, false, false, true},
      {2048, 1536, true, false, true, false}, {8960, 1536, false, true, true, false},
      {640, 3072, false, false, true, true},  {300, 8192, false, false, true, false},
      {1024, 4096, false, true, true, false}, {37, 64, true, false, true, true},
      {5, 24, false, true, true, false},      {300, 8192, true, false, true, true},
      {6000, 64, true, false, false, true}};
  const double eps = 1e-6;
  // Early inputs (loaded before the kernel's wait) give the same bits: the residual and bias of
  // a K split over warps (896 × 4,864, 300 × 8,192), of whole rows, and of blocks' later row
  // groups (6,000 rows).
  const microllm::testing::ScopedEnv early_env("MICROLLM_GEMV_EARLY_INPUTS", "1");
  for (bool early : {false, true})
    for (DType dtype : kGemvDtypes)
      for (const FusedCase& c : cases)
        for (int64_t M : {1, 2, 3, 4, 5, 8}) {
          if (!ops::gemv_norm_supported(kGpu, dtype, M, c.K) && c.norm) continue;
          const int64_t rows = c.swiglu ? 2 * c.N : c.N;
          const Tensor x = host_randn({M, c.K}, 21 + static_cast<uint64_t>(M), dtype).to(kGpu);
          const Tensor w = host_randn({rows, c.K}, 22, dtype).to(kGpu);
          const Tensor b = c.bias ? host_randn({c.N}, 23, dtype).to(kGpu) : Tensor();
          const Tensor g = host_randn({c.K}, 24, dtype).to(kGpu);
          const Tensor r = host_randn({M, c.N}, 25, dtype).to(kGpu);
          const ops::GemvEpilogue epi =
              c.swiglu ? ops::GemvEpilogue::swiglu : ops::GemvEpilogue::none;
          // The separate operators.
          Tensor input = x;
          if (c.norm) {
            input = Tensor::empty({M, c.K}, dtype, kGpu);
            ops::rms_norm_out(x, g, eps, input);
          }
          Tensor want = Tensor::empty({M, c.N}, dtype, kGpu);
          ops::gemv_out(input, w, b, want, epi);
          if (c.residual) ops::add_out(r, want, want);
          // Fused, out of place and (with a residual) in place.
          ops::GemvFusion f;
          f.epilogue = epi;
          f.early_inputs = early;
          if (c.norm) {
            f.norm_weight = g;
            f.norm_eps = eps;
          }
          if (c.residual) f.residual = r;
          Tensor got = Tensor::empty({M, c.N}, dtype, kGpu);
          ops::gemv_out(x, w, b, got, f);
          const std::string where = std::string(dtype_name(dtype)) + " N " + std::to_string(c.N) +
                                    " K " + std::to_string(c.K) + " M " + std::to_string(M) +
                                    " early " + std::to_string(early);
          EXPECT_TRUE(same_bits(got, want)) << where;
          if (c.residual) {
            Tensor stream = r.clone();  // the residual stream, updated in place
            f.residual = stream;
            ops::gemv_out(x, w, b, stream, f);
            EXPECT_TRUE(same_bits(stream, want)) << where << " in place";
          }
        }
}

// The QKV GEMV with the rope_kv_write epilogue writes q_out, k_out and both caches with the
// bits of gemv_out into a (M, H·D + 2·Hkv·D) buffer followed by rope_kv_write on its views.
TEST(CudaGemv, RopeKvWriteEpilogueGivesTheBitsOfTheSeparateOperators) {
  MICROLLM_REQUIRE_CUDA();
  struct Heads {
    int64_t H, Hkv, D, K;
  };
  const Heads shapes[] = {{14, 2, 64, 896}, {12, 2, 128, 1536}, {4, 4, 64, 64}};
  const int64_t NB = 6, BS = 4;
  const microllm::testing::ScopedEnv early_env("MICROLLM_GEMV_EARLY_INPUTS", "1");
  for (bool early : {false, true})
    for (DType dtype : kGemvDtypes)
      for (DType cache_dtype : {DType::F32, DType::BF16})
        for (const Heads& h : shapes)
          for (int64_t M : {1, 3, 4, 5, 8}) {
            if (!ops::gemv_norm_supported(kGpu, dtype, M, h.K)) continue;  // f32 (8, 1536): 48 KB
            const int64_t width = (h.H + 2 * h.Hkv) * h.D;
            const Tensor x = host_randn({M, h.K}, 31 + static_cast<uint64_t>(M), dtype).to(kGpu);
            const Tensor w = host_randn({width, h.K}, 32, dtype).to(kGpu);
            const Tensor b = host_randn({width}, 33, dtype).to(kGpu);
            const Tensor g = host_randn({h.K}, 34, dtype).to(kGpu);
            std::vector<int64_t> pos, slot;
            for (int64_t m = 0; m < M; ++m) {
              pos.push_back(7 + 301 * m);
              slot.push_back(m == 2 ? -1 : (5 * m + 3) % (NB * BS));  // row 2: graph padding
            }
            const Tensor positions = Tensor::from_vector(pos, {M}, DType::I32).to(kGpu);
            const Tensor slots = Tensor::from_vector(slot, {M}, DType::I32).to(kGpu);
            std::vector<double> freq;
            for (int64_t i = 0; i < h.D / 2; ++i)
              freq.push_back(std::pow(10000.0, -2.0 * static_cast<double>(i) / h.D));
            const Tensor inv_freq = Tensor::from_vector(freq, {h.D / 2}, DType::F32).to(kGpu);
            const Tensor cache0 = host_randn({NB, BS, h.Hkv, h.D}, 35, cache_dtype);
            // The separate operators.
            Tensor qkv = Tensor::empty({M, width}, dtype, kGpu);
            ops::GemvFusion norm;
            norm.norm_weight = g;
            norm.norm_eps = 1e-6;
            ops::gemv_out(x, w, b, qkv, norm);
            Tensor want_q = Tensor::empty({M, h.H, h.D}, dtype, kGpu);
            Tensor want_k = Tensor::empty({M, h.Hkv, h.D}, dtype, kGpu);
            Tensor want_kc = cache0.to(kGpu), want_vc = cache0.to(kGpu);
            ops::rope_kv_write(
                qkv.narrow(1, 0, h.H * h.D).view({M, h.H, h.D}),
                qkv.narrow(1, h.H * h.D, h.Hkv * h.D).view({M, h.Hkv, h.D}),
                qkv.narrow(1, (h.H + h.Hkv) * h.D, h.Hkv * h.D).view({M, h.Hkv, h.D}), positions,
                inv_freq, slots, want_q, want_k, want_kc, want_vc);
            // Fused.
            ops::GemvFusion f = norm;
            f.epilogue = ops::GemvEpilogue::rope_kv_write;
            f.early_inputs = early;  // positions, slots, bias, inv_freq and the norm weight
            f.rope = {positions,
                      inv_freq,
                      slots,
                      Tensor::empty({M, h.H, h.D}, dtype, kGpu),
                      Tensor::empty({M, h.Hkv, h.D}, dtype, kGpu),
                      cache0.to(kGpu),
                      cache0.to(kGpu)};
            ops::gemv_out(x, w, b, Tensor(), f);
            const std::string where = std::string(dtype_name(dtype)) + " cache " +
                                      std::string(dtype_name(cache_dtype)) + " H " +
                                      std::to_string(h.H) + " D " + std::to_string(h.D) + " M " +
                                      std::to_string(M) + " early " + std::to_string(early);
            EXPECT_TRUE(same_bits(f.rope.q_out, want_q)) << where << " q";
            EXPECT_TRUE(same_bits(f.rope.k_out, want_k)) << where << " k";
            EXPECT_TRUE(same_bits(f.rope.k_cache, want_kc)) << where << " k cache";
            EXPECT_TRUE(same_bits(f.rope.v_cache, want_vc)) << where << " v cache";
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
  // The norm prologue keeps the rows in shared memory: 8 rows of 3,072 BF16 are too many.
  EXPECT_TRUE(ops::gemv_norm_supported(kGpu, DType::BF16, 4, 3072));
  EXPECT_FALSE(ops::gemv_norm_supported(kGpu, DType::BF16, 8, 3072));
  const Tensor xw = host_randn({8, 3072}, 5, DType::BF16).to(kGpu);
  ops::GemvFusion norm;
  norm.norm_weight = host_randn({3072}, 6, DType::BF16).to(kGpu);
  EXPECT_TRUE(throws_error(
      [&] {
        ops::gemv_out(xw, host_randn({4, 3072}, 7, DType::BF16).to(kGpu), {},
                      Tensor::empty({8, 4}, DType::BF16, kGpu), norm);
      },
      "gemv_out", {"shared memory", "found x"}));
  EXPECT_FALSE(ops::gemv_supported(kGpu, DType::F64, 1, 16));
  EXPECT_TRUE(ops::gemv_supported(kGpu, DType::BF16, 8, 896));
  EXPECT_FALSE(ops::gemv_supported(kGpu, DType::F32, 9, 896));
  EXPECT_FALSE(ops::gemv_supported(kGpu, DType::BF16, 9, 896));
  const Tensor x9 = host_randn({9, 16}, 8, DType::F32).to(kGpu);
  EXPECT_TRUE(throws_error(
      [&] {
        ops::gemv_out(x9, host_randn({4, 16}, 9, DType::F32).to(kGpu), {},
                      Tensor::empty({9, 4}, DType::F32, kGpu));
      },
      "gemv_out", {"takes 1 to 8 rows", "found x"}));
}
