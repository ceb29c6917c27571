// paged_attention on the CPU against the reference attention (ops::attention run per
// sequence with explicit positions, src/ops/attention) on the same values: several sequences
// of different lengths in a shuffled paged cache, written through kv_write, then whole
// prefill, prefill in three chunks (later chunks read the earlier ones from the cache) and
// decode of one token per sequence; block sizes 1, 16 and 5 (not dividing the lengths),
// GQA ratios 1, 2, 7, 8, D 64 and 128, F32, F64 and BF16; padding rows, strided views,
// a custom scale and the error messages.
#include <gtest/gtest.h>

#include <cmath>
#include <sstream>
#include <string>

#include "core/expect_error.h"
#include "microllm/ops/attention.h"
#include "microllm/ops/kv_write.h"
#include "microllm/ops/paged_attention.h"
#include "ops/paged_attention/paged_step_fixture.h"

using namespace microllm;
using namespace microllm::testing::paged;
using microllm::testing::throws_error;

namespace {

struct Heads {
  int64_t H, Hkv, D;
};

// kv_write of the step's rows, then paged_attention; returns out (N, H, D) in q's dtype.
Tensor run_step(const Step& step, const Tensor& k_cache, const Tensor& v_cache,
                double scale = NAN) {
  ops::kv_write(step.k, step.v, step.slot_mapping, k_cache, v_cache);
  Tensor out = Tensor::full(step.q.shape(), 3.0, step.q.dtype());  // (N, H, D) overwritten
  ops::paged_attention(step.q, k_cache, v_cache, step.query_starts, step.seq_lens,
                       step.block_tables, scale, step.max_seq_len, out,
                       workspace_for(step, step.max_seq_len));
  return out;
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  const std::vector<double> x = a.to_vector_f64(), y = b.to_vector_f64();
  if (x.size() != y.size()) return INFINITY;
  double worst = 0.0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double d = std::fabs(x[i] - y[i]);
    if (!(d <= worst)) worst = std::isnan(d) ? INFINITY : d;
  }
  return worst;
}

// Max over elements of |got − want| / (atol + rtol·|want|): ≤ 1 is within tolerance.
double tolerance_ratio(const Tensor& got, const Tensor& want, double atol, double rtol) {
  const std::vector<double> x = got.to_vector_f64(), y = want.to_vector_f64();
  double worst = 0.0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double r = std::fabs(x[i] - y[i]) / (atol + rtol * std::fabs(y[i]));
    if (!(r <= worst)) worst = std::isnan(r) ? INFINITY : r;
  }
  return worst;
}

// Checks every sequence's rows of `out` against the reference and the padding rows for zeros.
// BF16 outputs are held to one BF16 rounding of the F32 reference (2^-8 relative).
::testing::AssertionResult rows_match(const Tensor& out, const Step& step,
                                      const std::vector<Sequence>& seqs, const Ranges& ranges,
                                      double scale = NAN) {
  const bool f64 = out.dtype() == DType::F64;
  const bool narrow = out.dtype() == DType::BF16 || out.dtype() == DType::F16;
  for (size_t b = 0; b < seqs.size(); ++b) {
    const auto [begin, end] = ranges[b];
    if (end == begin) continue;
    const Tensor got = out.narrow(0, step.row_of[b], end - begin);
    const Tensor want = reference_rows(seqs[b], begin, end, f64 ? DType::F64 : DType::F32, scale);
    const double ratio = narrow ? tolerance_ratio(got, want, 1e-5, 1.0 / 256)
                                : max_abs_diff(got, want) / (f64 ? 1e-12 : 1e-5);
    if (!(ratio <= 1.0))
      return ::testing::AssertionFailure() << "sequence " << b << " rows [" << begin << ", " << end
                                           << "): worst error ratio " << ratio;
  }
  const int64_t real = step.query_starts.to_vector_i64().back();
  for (int64_t r = real; r < out.size(0); ++r)
    for (double x : out.narrow(0, r, 1).to_vector_f64())
      if (x != 0.0) return ::testing::AssertionFailure() << "padding row " << r << " is not zero";
  return ::testing::AssertionSuccess();
}

std::string describe(const Heads& h, int64_t BS, DType q_dtype, DType cache_dtype) {
  std::ostringstream out;
  out << "H " << h.H << " Hkv " << h.Hkv << " D " << h.D << " BS " << BS << " q " << q_dtype
      << " cache " << cache_dtype;
  return out.str();
}

// Every schedule of `lengths` for one configuration; returns the first failure.
::testing::AssertionResult schedules_match(const Heads& h, int64_t BS, DType q_dtype,
                                           DType cache_dtype, uint64_t seed) {
  const std::vector<int64_t> lengths = {37, 5, 20, 1};
  const DType values =
      q_dtype == DType::BF16 || cache_dtype == DType::BF16 ? DType::BF16 : DType::F32;
  const std::vector<Sequence> seqs = make_sequences(lengths, h.H, h.Hkv, h.D, seed, values);
  const Layout layout = make_layout(lengths, BS, seed + 1);
  int schedule = 0;
  for (const std::vector<Ranges>& steps : standard_schedules(lengths)) {
    const Tensor k_cache = nan_cache(layout, h.Hkv, h.D, cache_dtype);
    const Tensor v_cache = nan_cache(layout, h.Hkv, h.D, cache_dtype);
    for (size_t i = 0; i < steps.size(); ++i) {
      const Step step = make_step(seqs, layout, steps[i], /*padding=*/2, q_dtype);
      const Tensor out = run_step(step, k_cache, v_cache);
      ::testing::AssertionResult r = rows_match(out, step, seqs, steps[i]);
      if (!r) return r << " (schedule " << schedule << ", step " << i << ")";
    }
    ++schedule;
  }
  return ::testing::AssertionSuccess();
}

const Heads kGqaHeads[] = {{2, 2, 64},  {4, 2, 64},  {7, 1, 64},
                           {8, 1, 128}, {4, 4, 128}, {14, 2, 128}};

}  // namespace

TEST(PagedAttention, MatchesAttentionForPrefillChunksAndDecodeInF32) {
  for (const Heads& h : kGqaHeads)
    for (int64_t BS : {1, 16, 5})
      EXPECT_TRUE(schedules_match(h, BS, DType::F32, DType::F32, 11))
          << describe(h, BS, DType::F32, DType::F32);
}

TEST(PagedAttention, Bf16CachesAndQueries) {
  // Values are BF16-representable, so an F32 query over a BF16 cache matches the reference at
  // the F32 tolerance, and a BF16 output is one BF16 rounding away from it.
  for (const Heads& h : {Heads{7, 1, 64}, Heads{4, 2, 128}})
    for (int64_t BS : {16, 5}) {
      EXPECT_TRUE(schedules_match(h, BS, DType::F32, DType::BF16, 21))
          << describe(h, BS, DType::F32, DType::BF16);
      EXPECT_TRUE(schedules_match(h, BS, DType::BF16, DType::BF16, 22))
          << describe(h, BS, DType::BF16, DType::BF16);
      EXPECT_TRUE(schedules_match(h, BS, DType::BF16, DType::F32, 23))
          << describe(h, BS, DType::BF16, DType::F32);
    }
}

TEST(PagedAttention, F64QueriesComputeInF64) {
  for (int64_t BS : {16, 5})
    EXPECT_TRUE(schedules_match({8, 2, 64}, BS, DType::F64, DType::F32, 31))
        << describe({8, 2, 64}, BS, DType::F64, DType::F32);
}

TEST(PagedAttention, AnyHeadDimOnTheCpu) {
  for (const Heads& h : {Heads{6, 3, 24}, Heads{4, 1, 256}, Heads{3, 3, 1}})
    EXPECT_TRUE(schedules_match(h, 7, DType::F32, DType::F32, 41))
        << describe(h, 7, DType::F32, DType::F32);
}

TEST(PagedAttention, CustomScaleLooseMaxSeqLenAndAnEmptySequence) {
  const std::vector<int64_t> lengths = {9, 30, 14};
  const std::vector<Sequence> seqs = make_sequences(lengths, 4, 2, 64, 51);
  const Layout layout = make_layout(lengths, 4, 52, /*spare=*/2, /*extra_columns=*/5);
  const Tensor k_cache = nan_cache(layout, 2, 64, DType::F32);
  const Tensor v_cache = nan_cache(layout, 2, 64, DType::F32);
  // Prefill all of sequence 1 only (the others have no new token), then one chunk of each.
  const Ranges first = {{0, 0}, {0, 30}, {0, 0}};
  const Step step1 = make_step(seqs, layout, first, 0, DType::F32);
  EXPECT_TRUE(rows_match(run_step(step1, k_cache, v_cache, 0.3), step1, seqs, first, 0.3));
  const Ranges second = {{0, 9}, {30, 30}, {0, 14}};
  const Step step2 = make_step(seqs, layout, second, 1, DType::F32);
  const Tensor tight = run_step(step2, k_cache, v_cache, 0.3);
  EXPECT_TRUE(rows_match(tight, step2, seqs, second, 0.3));
  // A max_seq_len up to the block tables' capacity changes nothing.
  Tensor loose = Tensor::empty(step2.q.shape());  // (N, H, D)
  const int64_t capacity = layout.M * layout.BS;
  ops::paged_attention(step2.q, k_cache, v_cache, step2.query_starts, step2.seq_lens,
                       step2.block_tables, 0.3, capacity, loose, workspace_for(step2, capacity));
  EXPECT_EQ(max_abs_diff(loose, tight), 0.0);
}

TEST(PagedAttention, StridedRowsOfAFusedQkvBuffer) {
  const int64_t H = 4, Hkv = 2, D = 64;
  const std::vector<int64_t> lengths = {13, 6};
  const std::vector<Sequence> seqs = make_sequences(lengths, H, Hkv, D, 61);
  const Layout layout = make_layout(lengths, 4, 62);
  const Ranges ranges = {{0, 13}, {0, 6}};
  const Step step = make_step(seqs, layout, ranges, 1, DType::F32);
  const int64_t N = step.q.size(0), width = (H + 2 * Hkv) * D;
  // qkv (N, (H + 2·Hkv)·D) holds q, k, v side by side; the views keep its row stride.
  const Tensor qkv = Tensor::empty({N, width});
  qkv.narrow(1, 0, H * D).copy_from(step.q.reshape({N, H * D}));
  qkv.narrow(1, H * D, Hkv * D).copy_from(step.k.reshape({N, Hkv * D}));
  qkv.narrow(1, (H + Hkv) * D, Hkv * D).copy_from(step.v.reshape({N, Hkv * D}));
  const Tensor q = qkv.narrow(1, 0, H * D).view({N, H, D});
  const Tensor k = qkv.narrow(1, H * D, Hkv * D).view({N, Hkv, D});
  const Tensor v = qkv.narrow(1, (H + Hkv) * D, Hkv * D).view({N, Hkv, D});
  ASSERT_FALSE(q.is_contiguous());
  const Tensor k_cache = nan_cache(layout, Hkv, D, DType::F32);
  const Tensor v_cache = nan_cache(layout, Hkv, D, DType::F32);
  ops::kv_write(k, v, step.slot_mapping, k_cache, v_cache);
  // out is a strided view too: (N, H·D) columns of an (N, H·D + 8) buffer of sentinels.
  const Tensor buffer = Tensor::full({N, H * D + 8}, 5.0);
  const Tensor out = buffer.narrow(1, 0, H * D).view({N, H, D});
  ops::paged_attention(q, k_cache, v_cache, step.query_starts, step.seq_lens, step.block_tables,
                       NAN, step.max_seq_len, out, workspace_for(step, step.max_seq_len));
  EXPECT_TRUE(rows_match(out, step, seqs, ranges));
  for (double x : buffer.narrow(1, H * D, 8).to_vector_f64()) ASSERT_EQ(x, 5.0);
}

TEST(PagedAttention, WorkspaceSizing) {
  // Steps with few rows and more than one 64-key chunk split; the size covers every N up to
  // max_tokens and every max_seq_len up to the given one, and is 0 when nothing splits.
  const int64_t bytes = ops::paged_attention_workspace_bytes(8, 14, 2, 64, 2048);
  // The split blocks' counters (264 words), then D + 2 floats per chunk of each query row.
  EXPECT_EQ(bytes, (264 + 8 * 14 * (2048 / 64) * (64 + 2)) * 4);
  EXPECT_EQ(ops::paged_attention_workspace_bytes(8, 14, 2, 64, 64), 0);  // one chunk
  EXPECT_EQ(ops::paged_attention_workspace_bytes(0, 14, 2, 64, 2048), 0);
  // Past 65 rows (65 · 2 KV heads · 2 head blocks = 260 blocks) nothing splits.
  EXPECT_EQ(ops::paged_attention_workspace_bytes(4096, 14, 2, 64, 2048),
            ops::paged_attention_workspace_bytes(65, 14, 2, 64, 2048));
  EXPECT_GE(ops::paged_attention_workspace_bytes(4096, 14, 2, 64, 2048),
            ops::paged_attention_workspace_bytes(4096, 14, 2, 64, 1000));
}

TEST(PagedAttention, RejectsBadArgumentsWithClearMessages) {
  const int64_t H = 4, Hkv = 2, D = 64;
  const std::vector<int64_t> lengths = {200, 3};
  const std::vector<Sequence> seqs = make_sequences(lengths, H, Hkv, D, 71);
  const Layout layout = make_layout(lengths, 16, 72);
  const Step step = make_step(seqs, layout, {{199, 200}, {2, 3}}, 0, DType::F32);
  const Tensor kc = nan_cache(layout, Hkv, D, DType::F32),
               vc = nan_cache(layout, Hkv, D, DType::F32);
  const Tensor out = Tensor::empty({2, H, D});
  const Tensor ws = workspace_for(step, 200);
  ASSERT_TRUE(ws.defined());  // two decode rows over 200 keys split
  const auto call = [&](const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                        const Tensor& starts, const Tensor& lens, const Tensor& tables,
                        int64_t max_seq_len, const Tensor& o, const Tensor& w) {
    ops::paged_attention(q, k_cache, v_cache, starts, lens, tables, NAN, max_seq_len, o, w);
  };
  const Tensor& qs = step.query_starts;
  const Tensor& sl = step.seq_lens;
  const Tensor& bt = step.block_tables;
  EXPECT_TRUE(throws_error(
      [&] {
        call(step.q.reshape({2, H * D}), kc, vc, qs, sl, bt, 200, out, ws);
      },
      "paged_attention", {"'q' must have rank 3", "f32(2, 256)"}));
  EXPECT_TRUE(throws_error(
      [&] {
        call(step.q, kc.reshape({17 * 16, Hkv, D}), vc, qs, sl, bt, 200, out, ws);
      },
      "paged_attention", {"'k_cache' must have rank 4"}));
  EXPECT_TRUE(throws_error(
      [&] {
        call(Tensor::empty({2, 3, D}), kc, vc, qs, sl, bt, 200, Tensor::empty({2, 3, D}), ws);
      },
      "paged_attention", {"query heads 3 are not a multiple of KV heads 2"}));
  EXPECT_TRUE(throws_error(
      [&] { call(step.q, kc.to(DType::F16), vc.to(DType::F16), qs, sl, bt, 200, out, ws); },
      "paged_attention", {"KV caches must be f32 or bf16", "f16(17, 16, 2, 64)"}));
  EXPECT_TRUE(throws_error([&] { call(step.q, kc, vc.to(DType::BF16), qs, sl, bt, 200, out, ws); },
                           "paged_attention", {"different dtypes"}));
  // 14 columns of 16 slots hold 224 keys.
  EXPECT_TRUE(throws_error([&] { call(step.q, kc, vc, qs, sl, bt, 225, out, ws); },
                           "paged_attention",
                           {"too narrow", "M = 14", "BS = 16", "224", "max_seq_len = 225"}));
  EXPECT_TRUE(throws_error(
      [&] { call(step.q, kc, vc, qs, sl, bt, 200, out, Tensor::empty({ws.numel() - 1})); },
      "paged_attention", {"holds", "needs", "paged_attention_workspace_bytes"}));
  EXPECT_TRUE(throws_error([&] { call(step.q, kc, vc, qs, sl, bt, 200, out, Tensor()); },
                           "paged_attention", {"needs a workspace of"}));
  EXPECT_TRUE(throws_error(
      [&] {
        call(step.q, kc, vc, qs, sl, bt, 200, Tensor::empty({2, H, 32}), ws);
      },
      "paged_attention", {"out must be (N, H, D)", "f32(2, 4, 32)"}));
  EXPECT_TRUE(throws_error(
      [&] {
        call(step.q, kc, vc, qs, sl, bt, 200, Tensor::empty({2, H, D}, DType::F64), ws);
      },
      "paged_attention", {"out must be (N, H, D) of q's dtype"}));
  EXPECT_TRUE(throws_error([&] { call(step.q, kc, vc, qs.to(DType::I64), sl, bt, 200, out, ws); },
                           "paged_attention", {"'query_starts' must be i32"}));
  EXPECT_TRUE(throws_error([&] { call(step.q, kc, vc, qs, sl, bt.narrow(0, 0, 1), 200, out, ws); },
                           "paged_attention", {"B = 2", "block_tables i32(1, 14)"}));
  EXPECT_TRUE(throws_error(
      [&] {
        call(step.q.transpose(1, 2).contiguous().transpose(1, 2), kc, vc, qs, sl, bt, 200, out, ws);
      },
      "paged_attention", {"'q' needs dense (4, 64) rows"}));
}
