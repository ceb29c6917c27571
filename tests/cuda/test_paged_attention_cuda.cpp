// CUDA paged attention against the CPU reference op on the same steps: whole prefill,
// chunked prefill and decode of several sequences in a shuffled paged cache (block sizes 1, 16
// and 5, GQA 1, 2, 7, 8, D 64 and 128, F32 / BF16 / F16 queries over F32 / BF16 caches), long
// contexts that take the split-K path (2,000 and 8,192 keys at batch 1, a mixed batch), the
// same row giving the same bits in split and single-pass steps, two runs giving the same bits,
// no allocation, copy or synchronization across the calls once set up, and the early loads of
// PagedHistory::earlier_steps giving the bits of the plain wait after the kernel that writes
// the step's new keys.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "core/expect_error.h"
#include "cuda/cuda_test_utils.h"
#include "microllm/cuda/allocator.h"
#include "microllm/ops/kv_write.h"
#include "microllm/ops/paged_attention.h"
#include "microllm/ops/rope.h"
#include "ops/paged_attention/paged_step_fixture.h"
#include "support/scoped_env.h"

using namespace microllm;
using namespace microllm::testing::paged;
using microllm::testing::relative_l2;
using microllm::testing::throws_error;
using microllm::testing::tolerance_ratio;

namespace {

const Device kGpu = Device::cuda(0);

struct Heads {
  int64_t H, Hkv, D;
};

// Caches (NB, BS, Hkv, D) on the CPU and the same bytes on the GPU.
struct CachePair {
  Tensor cpu_k, cpu_v, gpu_k, gpu_v;
  CachePair(const Layout& layout, int64_t Hkv, int64_t D, DType dtype)
      : cpu_k(nan_cache(layout, Hkv, D, dtype)),
        cpu_v(nan_cache(layout, Hkv, D, dtype)),
        gpu_k(cpu_k.to(kGpu)),
        gpu_v(cpu_v.to(kGpu)) {}
};

// paged_attention of `step` into a new (N, H, D) output on the step's device.
Tensor attend(const Step& step, const Tensor& k_cache, const Tensor& v_cache, int64_t max_seq_len) {
  const Device device = step.q.device();
  Tensor out = Tensor::full(step.q.shape(), 3.0, step.q.dtype(), device);  // (N, H, D)
  ops::paged_attention(step.q, k_cache, v_cache, step.query_starts, step.seq_lens,
                       step.block_tables, NAN, max_seq_len, out,
                       workspace_for(step, max_seq_len, device));
  return out;
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  const Tensor x = a.to(Device::cpu()).contiguous(), y = b.to(Device::cpu()).contiguous();
  return x.dtype() == y.dtype() && x.shape() == y.shape() &&
         std::memcmp(x.raw_data(), y.raw_data(), x.nbytes()) == 0;
}

// CUDA output against the CPU output of the same step: F32 within 5e-5 (SPEC §6), narrow
// dtypes by relative L2 ≤ 1e-2 and element-wise within two roundings of the output dtype.
::testing::AssertionResult outputs_agree(const Tensor& gpu, const Tensor& cpu) {
  const Tensor got = gpu.to(Device::cpu());
  if (cpu.dtype() == DType::F32) {
    const double ratio = tolerance_ratio(got, cpu, 5e-5, 5e-5);
    if (!(ratio <= 1.0)) return ::testing::AssertionFailure() << "F32 worst ratio " << ratio;
    return ::testing::AssertionSuccess();
  }
  const double rel = relative_l2(got, cpu);
  const double ratio =
      tolerance_ratio(got, cpu, 1e-4, cpu.dtype() == DType::BF16 ? 1.0 / 128 : 2e-3);
  if (!(rel <= 1e-2) || !(ratio <= 1.0))
    return ::testing::AssertionFailure()
           << cpu.dtype() << " relative L2 " << rel << ", element-wise worst ratio " << ratio;
  return ::testing::AssertionSuccess();
}

// Every standard schedule of `lengths`, each step on both devices; outputs and caches compared.
::testing::AssertionResult schedules_agree(const Heads& h, int64_t BS, DType q_dtype,
                                           DType cache_dtype, uint64_t seed) {
  const std::vector<int64_t> lengths = {37, 5, 20, 1, 70};
  const std::vector<Sequence> seqs = make_sequences(lengths, h.H, h.Hkv, h.D, seed);
  const Layout layout = make_layout(lengths, BS, seed + 1);
  int schedule = 0;
  for (const std::vector<Ranges>& steps : standard_schedules(lengths)) {
    CachePair c(layout, h.Hkv, h.D, cache_dtype);
    for (size_t i = 0; i < steps.size(); ++i) {
      const Step cpu = make_step(seqs, layout, steps[i], /*padding=*/2, q_dtype);
      const Step gpu = to_device(cpu, kGpu);
      ops::kv_write(cpu.k, cpu.v, cpu.slot_mapping, c.cpu_k, c.cpu_v);
      ops::kv_write(gpu.k, gpu.v, gpu.slot_mapping, c.gpu_k, c.gpu_v);
      if (!same_bytes(c.gpu_k, c.cpu_k) || !same_bytes(c.gpu_v, c.cpu_v))
        return ::testing::AssertionFailure()
               << "caches differ after kv_write (schedule " << schedule << ", step " << i << ")";
      ::testing::AssertionResult r = outputs_agree(attend(gpu, c.gpu_k, c.gpu_v, gpu.max_seq_len),
                                                   attend(cpu, c.cpu_k, c.cpu_v, cpu.max_seq_len));
      if (!r) return r << " (schedule " << schedule << ", step " << i << ")";
    }
    ++schedule;
  }
  return ::testing::AssertionSuccess();
}

std::string describe(const Heads& h, int64_t BS, DType q_dtype, DType cache_dtype) {
  std::ostringstream out;
  out << "H " << h.H << " Hkv " << h.Hkv << " D " << h.D << " BS " << BS << " q " << q_dtype
      << " cache " << cache_dtype;
  return out.str();
}

// Long sequences in one pool: their first `written[b]` tokens are already in the caches
// (written on both devices); steps then add the rest.
struct LongContext {
  Heads h;
  std::vector<int64_t> lengths;
  std::vector<Sequence> seqs;
  Layout layout;
  CachePair caches;
  LongContext(const Heads& heads, const std::vector<int64_t>& lens,
              const std::vector<int64_t>& written, DType cache_dtype, uint64_t seed)
      : h(heads),
        lengths(lens),
        seqs(make_sequences(lens, heads.H, heads.Hkv, heads.D, seed)),
        layout(make_layout(lens, 16, seed + 1)),
        caches(layout, heads.Hkv, heads.D, cache_dtype) {
    Ranges prefix;
    for (int64_t w : written) prefix.push_back({0, w});
    const Step cpu = make_step(seqs, layout, prefix, 0, DType::F32);
    const Step gpu = to_device(cpu, kGpu);
    ops::kv_write(cpu.k, cpu.v, cpu.slot_mapping, caches.cpu_k, caches.cpu_v);
    ops::kv_write(gpu.k, gpu.v, gpu.slot_mapping, caches.gpu_k, caches.gpu_v);
  }
};

// The rows [row, row + n) of out, as a CPU tensor.
Tensor rows(const Tensor& out, int64_t row, int64_t n) {
  return out.narrow(0, row, n).to(Device::cpu()).contiguous();
}

}  // namespace

TEST(CudaPagedAttention, MatchesCpuForPrefillChunksAndDecode) {
  MICROLLM_REQUIRE_CUDA();
  const Heads heads[] = {{2, 2, 64}, {4, 2, 128}, {7, 1, 64}, {8, 1, 128}, {14, 2, 64}};
  for (const Heads& h : heads)
    for (int64_t BS : {1, 16, 5})
      for (DType dtype : microllm::testing::kCudaTestDtypes)
        EXPECT_TRUE(schedules_agree(h, BS, dtype, dtype, 11)) << describe(h, BS, dtype, dtype);
}

TEST(CudaPagedAttention, MixedQueryAndCacheDtypes) {
  MICROLLM_REQUIRE_CUDA();
  for (const Heads& h : {Heads{7, 1, 64}, Heads{8, 2, 128}}) {
    EXPECT_TRUE(schedules_agree(h, 16, DType::F32, DType::BF16, 21))
        << describe(h, 16, DType::F32, DType::BF16);
    EXPECT_TRUE(schedules_agree(h, 16, DType::BF16, DType::F32, 22))
        << describe(h, 16, DType::BF16, DType::F32);
    EXPECT_TRUE(schedules_agree(h, 5, DType::F16, DType::BF16, 23))
        << describe(h, 5, DType::F16, DType::BF16);
  }
}

TEST(CudaPagedAttention, LongContextDecodeAtBatchOneSplitsKeys) {
  MICROLLM_REQUIRE_CUDA();
  for (const Heads& h : {Heads{14, 2, 64}, Heads{32, 8, 128}})
    for (int64_t T : {2000, 8192})
      for (DType dtype : microllm::testing::kCudaTestDtypes) {
        LongContext ctx(h, {T}, {T - 1}, dtype, 31);
        const Step cpu = make_step(ctx.seqs, ctx.layout, {{T - 1, T}}, 0, dtype);
        const Step gpu = to_device(cpu, kGpu);
        ops::kv_write(cpu.k, cpu.v, cpu.slot_mapping, ctx.caches.cpu_k, ctx.caches.cpu_v);
        ops::kv_write(gpu.k, gpu.v, gpu.slot_mapping, ctx.caches.gpu_k, ctx.caches.gpu_v);
        const Tensor got = attend(gpu, ctx.caches.gpu_k, ctx.caches.gpu_v, T);
        EXPECT_TRUE(outputs_agree(got, attend(cpu, ctx.caches.cpu_k, ctx.caches.cpu_v, T)))
            << describe(h, 16, dtype, dtype) << " T " << T;
        // A looser bound (the block tables' capacity) launches more chunk blocks, same bits.
        const int64_t capacity = ctx.layout.M * ctx.layout.BS;
        EXPECT_TRUE(same_bytes(attend(gpu, ctx.caches.gpu_k, ctx.caches.gpu_v, capacity), got))
            << describe(h, 16, dtype, dtype) << " T " << T;
      }
}

TEST(CudaPagedAttention, MixedBatchGivesEachRowTheSameBitsInSplitAndSinglePassSteps) {
  MICROLLM_REQUIRE_CUDA();
  const Heads h{14, 2, 64};  // 2 KV heads × 2 head blocks: 4 blocks per row
  const std::vector<int64_t> lengths = {8192, 2000, 300, 1};
  for (DType dtype : microllm::testing::kCudaTestDtypes) {
    LongContext ctx(h, lengths, {8191, 1999, 200, 0}, dtype, 41);
    // Split step: two decode rows, a 40-row chunk, a first token and padding: 45 rows · 4 < 264.
    const Ranges split_ranges = {{8191, 8192}, {1999, 2000}, {200, 240}, {0, 1}};
    const Step split_cpu = make_step(ctx.seqs, ctx.layout, split_ranges, 2, dtype);
    // Single-pass step: the same rows with the chunk grown to 100 rows: 103 rows · 4 ≥ 264.
    const Ranges single_ranges = {{8191, 8192}, {1999, 2000}, {200, 300}, {0, 1}};
    const Step single_cpu = make_step(ctx.seqs, ctx.layout, single_ranges, 0, dtype);
    const Step split = to_device(split_cpu, kGpu), single = to_device(single_cpu, kGpu);
    ops::kv_write(single_cpu.k, single_cpu.v, single_cpu.slot_mapping, ctx.caches.cpu_k,
                  ctx.caches.cpu_v);
    ops::kv_write(single.k, single.v, single.slot_mapping, ctx.caches.gpu_k, ctx.caches.gpu_v);
    const Tensor split_out = attend(split, ctx.caches.gpu_k, ctx.caches.gpu_v, 8192);
    const Tensor single_out = attend(single, ctx.caches.gpu_k, ctx.caches.gpu_v, 8192);
    // Both steps read caches that hold every row of the single-pass step.
    EXPECT_TRUE(
        outputs_agree(split_out, attend(split_cpu, ctx.caches.cpu_k, ctx.caches.cpu_v, 8192)))
        << dtype << " split step";
    EXPECT_TRUE(
        outputs_agree(single_out, attend(single_cpu, ctx.caches.cpu_k, ctx.caches.cpu_v, 8192)))
        << dtype << " single-pass step";
    // Row for row the same bits: decode rows, the chunk's first 40 rows and the first token.
    EXPECT_TRUE(same_bytes(rows(split_out, 0, 42), rows(single_out, 0, 42))) << dtype;
    EXPECT_TRUE(same_bytes(rows(split_out, 42, 1), rows(single_out, 102, 1))) << dtype;
    // The two decode rows in a step of their own (N = 2, split) match too.
    const Ranges decode_ranges = {{8191, 8192}, {1999, 2000}, {200, 200}, {0, 0}};
    const Step decode = to_device(make_step(ctx.seqs, ctx.layout, decode_ranges, 0, dtype), kGpu);
    EXPECT_TRUE(same_bytes(attend(decode, ctx.caches.gpu_k, ctx.caches.gpu_v, 8192),
                           rows(single_out, 0, 2)))
        << dtype;
  }
}

// MICROLLM_PAGED_SHORT_ROWS=N: in a split step the rows of at most N 64-key chunks (two by
// default) are computed by one block each, with no partials or counter. Decode rows of 1 to 32
// chunks, a first token and padding give the bits of every row split (N = 0) at each N;
// switching back and forth (the same workspace) checks that every call leaves its counters
// zero.
TEST(CudaPagedAttention, ShortRowsAloneGiveTheBitsOfSplitMode) {
  MICROLLM_REQUIRE_CUDA();
  const Heads h{14, 2, 64};  // 9 rows · 2 KV heads: few blocks, a split step
  const std::vector<int64_t> lengths = {2, 37, 64, 65, 128, 129, 200, 2000, 1};
  const int64_t max_len = 2000;  // the block tables hold no more
  std::vector<int64_t> written;
  Ranges decode;
  for (int64_t T : lengths) {
    written.push_back(T - 1);
    decode.push_back({T - 1, T});
  }
  for (DType dtype : microllm::testing::kCudaTestDtypes) {
    LongContext ctx(h, lengths, written, dtype, 81);
    const Step cpu = make_step(ctx.seqs, ctx.layout, decode, 3, dtype);
    const Step gpu = to_device(cpu, kGpu);
    ops::kv_write(cpu.k, cpu.v, cpu.slot_mapping, ctx.caches.cpu_k, ctx.caches.cpu_v);
    ops::kv_write(gpu.k, gpu.v, gpu.slot_mapping, ctx.caches.gpu_k, ctx.caches.gpu_v);
    const Tensor workspace = workspace_for(gpu, max_len, kGpu);
    const auto run = [&](const char* setting) {
      microllm::testing::ScopedEnv env("MICROLLM_PAGED_SHORT_ROWS", setting);
      Tensor out = Tensor::full(gpu.q.shape(), 3.0, dtype, kGpu);  // (N, H, D)
      ops::paged_attention(gpu.q, ctx.caches.gpu_k, ctx.caches.gpu_v, gpu.query_starts,
                           gpu.seq_lens, gpu.block_tables, NAN, max_len, out, workspace);
      return out;
    };
    const Tensor want = run("0");  // every row split
    EXPECT_TRUE(outputs_agree(want, attend(cpu, ctx.caches.cpu_k, ctx.caches.cpu_v, max_len)))
        << dtype;
    for (const char* setting : {"2", "0", "1", "4", "8", "2", "0"})
      EXPECT_TRUE(same_bytes(run(setting), want))
          << dtype << " MICROLLM_PAGED_SHORT_ROWS=" << setting;
  }
}

TEST(CudaPagedAttention, ChunkedPrefillGivesTheBitsOfWholePrefill) {
  MICROLLM_REQUIRE_CUDA();
  const Heads h{8, 2, 128};
  const std::vector<int64_t> lengths = {300, 77};
  const std::vector<Sequence> seqs = make_sequences(lengths, h.H, h.Hkv, h.D, 51);
  const Layout layout = make_layout(lengths, 16, 52);
  const std::vector<std::vector<Ranges>> all = standard_schedules(lengths);
  CachePair whole_caches(layout, h.Hkv, h.D, DType::BF16),
      chunk_caches(layout, h.Hkv, h.D, DType::BF16);
  const Step whole = to_device(make_step(seqs, layout, all[0][0], 0, DType::BF16), kGpu);
  ops::kv_write(whole.k, whole.v, whole.slot_mapping, whole_caches.gpu_k, whole_caches.gpu_v);
  const Tensor whole_out = attend(whole, whole_caches.gpu_k, whole_caches.gpu_v, 300);
  for (const Ranges& ranges : all[1]) {
    const Step chunk = to_device(make_step(seqs, layout, ranges, 0, DType::BF16), kGpu);
    ops::kv_write(chunk.k, chunk.v, chunk.slot_mapping, chunk_caches.gpu_k, chunk_caches.gpu_v);
    const Tensor out = attend(chunk, chunk_caches.gpu_k, chunk_caches.gpu_v, 300);
    for (size_t b = 0; b < lengths.size(); ++b) {
      const auto [begin, end] = ranges[b];
      EXPECT_TRUE(same_bytes(rows(out, chunk.row_of[b], end - begin),
                             rows(whole_out, whole.row_of[b] + begin, end - begin)))
          << "sequence " << b << " rows [" << begin << ", " << end << ")";
    }
  }
}

TEST(CudaPagedAttention, DeterministicWithoutAllocationsCopiesOrSynchronizations) {
  MICROLLM_REQUIRE_CUDA();
  const Heads h{14, 2, 64};
  LongContext ctx(h, {2048, 500, 90}, {2047, 499, 0}, DType::BF16, 61);
  // A split step (decode) and a single-pass step (prefill of 90 rows plus the decode rows).
  const Step decode = to_device(
      make_step(ctx.seqs, ctx.layout, {{2047, 2048}, {499, 500}, {0, 0}}, 1, DType::BF16), kGpu);
  const Step mixed = to_device(
      make_step(ctx.seqs, ctx.layout, {{2047, 2048}, {499, 500}, {0, 90}}, 0, DType::BF16), kGpu);
  const int64_t bytes =
      ops::paged_attention_workspace_bytes(mixed.q.size(0), h.H, h.Hkv, h.D, 2048);
  ASSERT_GT(bytes, 0);
  const Tensor workspace = Tensor::zeros({bytes / 4}, DType::F32, kGpu);  // shared by both steps
  const Tensor out_decode = Tensor::empty(decode.q.shape(), DType::BF16, kGpu);
  const Tensor out_mixed = Tensor::empty(mixed.q.shape(), DType::BF16, kGpu);
  const Tensor first_decode = Tensor::empty(decode.q.shape(), DType::BF16, kGpu);
  const Tensor first_mixed = Tensor::empty(mixed.q.shape(), DType::BF16, kGpu);
  const auto run = [&](const Step& s, const Tensor& out) {
    ops::kv_write(s.k, s.v, s.slot_mapping, ctx.caches.gpu_k, ctx.caches.gpu_v);
    ops::paged_attention(s.q, ctx.caches.gpu_k, ctx.caches.gpu_v, s.query_starts, s.seq_lens,
                         s.block_tables, NAN, 2048, out, workspace);
  };
  run(decode, first_decode);  // warm-up: streams, kernels
  run(mixed, first_mixed);
  cuda::synchronize(cuda::current_stream(kGpu));
  const cuda::AllocatorStats before = cuda::allocator_stats(kGpu);
  cuda::reset_transfer_stats();
  for (int i = 0; i < 3; ++i) {
    run(decode, out_decode);
    run(mixed, out_mixed);
  }
  const cuda::TransferStats t = cuda::transfer_stats();
  const cuda::AllocatorStats after = cuda::allocator_stats(kGpu);
  EXPECT_EQ(after.allocations, before.allocations);
  EXPECT_EQ(after.backend_mallocs, before.backend_mallocs);
  EXPECT_EQ(t.h2d_calls + t.d2h_calls + t.d2d_calls, 0);
  EXPECT_EQ(t.host_synchronizations, 0);
  EXPECT_TRUE(same_bytes(out_decode, first_decode));
  EXPECT_TRUE(same_bytes(out_mixed, first_mixed));
}

// The decode step's pattern: the kernel just before attention (rope_kv_write, launched as a
// dependent grid) writes the step's new keys into a NaN-poisoned cache, and attention with
// PagedHistory::earlier_steps loads the history before it waits for that kernel. Every step of
// every schedule (whole prefill, chunks, decode; single-pass and split steps) gives the bits of
// the plain wait, with no NaN (a new key read before it was written would show as one).
TEST(CudaPagedAttention, EarlyHistoryLoadsGiveTheBitsOfThePlainWait) {
  MICROLLM_REQUIRE_CUDA();
  const Heads h{14, 2, 64};
  const std::vector<int64_t> lengths = {37, 5, 20, 1, 300};  // decode steps split 300 keys
  const std::vector<Sequence> seqs = make_sequences(lengths, h.H, h.Hkv, h.D, 71);
  const Layout layout = make_layout(lengths, 16, 72);
  const Tensor inv_freq = ops::rope_inv_freq(h.D, 1e6).to(kGpu);  // (D/2) F32
  for (DType dtype : {DType::BF16, DType::F32}) {
    int schedule = 0;
    for (const std::vector<Ranges>& steps : standard_schedules(lengths)) {
      CachePair early(layout, h.Hkv, h.D, dtype), plain(layout, h.Hkv, h.D, dtype);
      for (size_t i = 0; i < steps.size(); ++i) {
        const Step step = to_device(make_step(seqs, layout, steps[i], 2, dtype), kGpu);
        std::vector<int64_t> position_values;  // (N) each row's position; padding rows 0
        for (const auto& [begin, end] : steps[i])
          for (int64_t j = begin; j < end; ++j) position_values.push_back(j);
        position_values.resize(static_cast<size_t>(step.q.size(0)), 0);
        const Tensor positions = Tensor::from_vector(
            position_values, {static_cast<int64_t>(position_values.size())}, DType::I32, kGpu);
        const Tensor workspace = workspace_for(step, 300, kGpu);
        const auto run = [&](CachePair& c, ops::PagedHistory history) {
          Tensor q = Tensor::empty(step.q.shape(), dtype, kGpu);  // (N, H, D)
          Tensor k = Tensor::empty(step.k.shape(), dtype, kGpu);  // (N, Hkv, D)
          Tensor out = Tensor::full(step.q.shape(), 3.0, dtype, kGpu);
          ops::rope_kv_write(step.q, step.k, step.v, positions, inv_freq, step.slot_mapping, q, k,
                             c.gpu_k, c.gpu_v);
          ops::paged_attention(q, c.gpu_k, c.gpu_v, step.query_starts, step.seq_lens,
                               step.block_tables, NAN, 300, out, workspace, history);
          return out;
        };
        const Tensor got = run(early, ops::PagedHistory::earlier_steps);
        const Tensor want = run(plain, ops::PagedHistory::unknown);
        EXPECT_TRUE(same_bytes(got, want)) << dtype << " schedule " << schedule << " step " << i;
        const std::vector<float> values = got.to_vector_f32();
        EXPECT_TRUE(
            std::all_of(values.begin(), values.end(), [](float v) { return std::isfinite(v); }))
            << dtype << " schedule " << schedule << " step " << i;
      }
      ++schedule;
    }
  }
}

TEST(CudaPagedAttention, RejectsWhatTheCudaKernelsDoNotTake) {
  MICROLLM_REQUIRE_CUDA();
  const std::vector<int64_t> lengths = {10};
  for (int64_t D : {96, 64}) {
    const std::vector<Sequence> seqs = make_sequences(lengths, 2, 1, D, 71);
    const Layout layout = make_layout(lengths, 4, 72);
    const Step step =
        to_device(make_step(seqs, layout, {{0, 10}}, 0, D == 64 ? DType::F64 : DType::F32), kGpu);
    const Tensor kc = nan_cache(layout, 1, D, DType::F32, kGpu),
                 vc = nan_cache(layout, 1, D, DType::F32, kGpu);
    const auto call = [&] {
      const Tensor out = Tensor::empty(step.q.shape(), step.q.dtype(), kGpu);
      ops::paged_attention(step.q, kc, vc, step.query_starts, step.seq_lens, step.block_tables, NAN,
                           10, out, Tensor());
    };
    if (D == 96)
      EXPECT_TRUE(throws_error(call, "paged_attention", {"head dims 64 and 128", "D = 96"}));
    else
      EXPECT_TRUE(throws_error(call, "paged_attention", {"CUDA kernels take f32, bf16 or f16"}));
  }
}
