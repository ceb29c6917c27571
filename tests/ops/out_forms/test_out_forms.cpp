// The allocation-free `_out` forms of the decode step's operators on the CPU: each equal bit
// for bit to its autograd operator on odd shapes (F32 and F64), never recording autograd,
// refusing bad arguments with clear errors, and making no heap allocation for F32 once warm.
//
// Heap allocations are counted by replacing the global operator new (every form) in this
// file: the replacement forwards to malloc / posix_memalign and counts, on every thread,
// only while an AllocationCount is alive. Tensor memory on the CPU comes from aligned_alloc,
// but every Tensor also allocates its TensorImpl and shape vectors through operator new, so a
// tensor (or view) made inside an `_out` form is counted.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <new>
#include <numeric>

#include "core/expect_error.h"
#include "microllm/core/random.h"
#include "microllm/ops/ops.h"

namespace {

std::atomic<bool> g_counting{false};
std::atomic<int64_t> g_allocations{0};

void* counted_malloc(std::size_t size) {
  if (g_counting.load(std::memory_order_relaxed))
    g_allocations.fetch_add(1, std::memory_order_relaxed);
  return std::malloc(size == 0 ? 1 : size);
}

void* counted_aligned(std::size_t size, std::align_val_t align) {
  if (g_counting.load(std::memory_order_relaxed))
    g_allocations.fetch_add(1, std::memory_order_relaxed);
  void* p = nullptr;
  const std::size_t alignment = std::max(static_cast<std::size_t>(align), sizeof(void*));
  return posix_memalign(&p, alignment, size == 0 ? 1 : size) == 0 ? p : nullptr;
}

void* throwing(void* p) {
  if (p == nullptr) throw std::bad_alloc();
  return p;
}

}  // namespace

void* operator new(std::size_t size) { return throwing(counted_malloc(size)); }
void* operator new[](std::size_t size) { return throwing(counted_malloc(size)); }
void* operator new(std::size_t size, const std::nothrow_t&) noexcept {
  return counted_malloc(size);
}
void* operator new[](std::size_t size, const std::nothrow_t&) noexcept {
  return counted_malloc(size);
}
void* operator new(std::size_t size, std::align_val_t align) {
  return throwing(counted_aligned(size, align));
}
void* operator new[](std::size_t size, std::align_val_t align) {
  return throwing(counted_aligned(size, align));
}
void* operator new(std::size_t size, std::align_val_t align, const std::nothrow_t&) noexcept {
  return counted_aligned(size, align);
}
void* operator new[](std::size_t size, std::align_val_t align, const std::nothrow_t&) noexcept {
  return counted_aligned(size, align);
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept { std::free(p); }

using namespace microllm;
using microllm::testing::throws_error;

namespace {

// Counts operator new calls on every thread while alive.
class AllocationCount {
 public:
  AllocationCount() {
    g_allocations.store(0);
    g_counting.store(true);
  }
  ~AllocationCount() { g_counting.store(false); }
  int64_t stop() {
    g_counting.store(false);
    return g_allocations.load();
  }
};

const DType kDtypes[] = {DType::F32, DType::F64};

Tensor randn_of(const Shape& shape, uint64_t seed, DType dtype, double mean = 0.0,
                double std = 1.0) {
  Generator gen(seed);
  return randn(shape, gen, dtype, Device::cpu(), mean, std);
}

Tensor positions_from(int64_t start, int64_t T, DType dtype) {
  std::vector<int64_t> values(static_cast<size_t>(T));
  std::iota(values.begin(), values.end(), start);
  return Tensor::from_vector(values, {T}, dtype);
}

// Same dtype, same shape and the same bytes (both read densely).
::testing::AssertionResult bit_equal(const Tensor& got, const Tensor& want) {
  if (got.dtype() != want.dtype() || got.shape() != want.shape())
    return ::testing::AssertionFailure() << got.describe() << " vs " << want.describe();
  const Tensor g = got.contiguous(), w = want.contiguous();
  if (g.numel() == 0 || std::memcmp(g.raw_data(), w.raw_data(), g.nbytes()) == 0)
    return ::testing::AssertionSuccess();
  const std::vector<double> gv = g.to_vector_f64(), wv = w.to_vector_f64();
  for (size_t i = 0; i < gv.size(); ++i)
    if (std::memcmp(&gv[i], &wv[i], sizeof(double)) != 0)
      return ::testing::AssertionFailure() << "element " << i << ": " << gv[i] << " vs " << wv[i]
                                           << " (" << got.describe() << ")";
  return ::testing::AssertionFailure() << "bytes differ";
}

}  // namespace

// ---- equal to the autograd operators ----------------------------------------------------------

TEST(OutForms, EmbeddingMatchesOperator) {
  for (DType dtype : {DType::F32, DType::F64, DType::BF16})
    for (DType id_dtype : {DType::I64, DType::I32}) {
      const Tensor weight = randn_of({11, 7}, 1, dtype);
      const Tensor ids = Tensor::from_vector(std::vector<int64_t>{3, 0, 10, 3, 7, 1, 9, 2, 5, 4},
                                             {2, 5}, id_dtype);
      const Tensor out = Tensor::empty({2, 5, 7}, dtype);
      ops::embedding_out(weight, ids, out);
      EXPECT_TRUE(bit_equal(out, ops::embedding(weight, ids))) << dtype << " " << id_dtype;
    }
}

TEST(OutForms, RmsNormMatchesOperator) {
  const std::vector<Shape> shapes = {{1, 1}, {3, 7}, {2, 3, 33}, {5, 130}};
  for (DType dtype : kDtypes)
    for (const Shape& shape : shapes) {
      const Tensor x = randn_of(shape, 2, dtype), w = randn_of({shape.back()}, 3, dtype, 1.0, 0.5);
      const Tensor out = Tensor::empty(shape, dtype);
      ops::rms_norm_out(x, w, 1e-6, out);
      EXPECT_TRUE(bit_equal(out, ops::rms_norm(x, w, 1e-6))) << dtype << shape_str(shape);
    }
}

TEST(OutForms, AddRmsNormMatchesOperatorAlsoInPlace) {
  const std::vector<Shape> shapes = {{1, 1}, {3, 7}, {2, 3, 33}};
  for (DType dtype : kDtypes)
    for (const Shape& shape : shapes) {
      const Tensor x = randn_of(shape, 4, dtype), r = randn_of(shape, 5, dtype);
      const Tensor w = randn_of({shape.back()}, 6, dtype, 1.0, 0.5);
      const ops::AddRmsNormResult want = ops::add_rms_norm(x, r, w, 1e-5);
      const Tensor sum = Tensor::empty(shape, dtype), normed = Tensor::empty(shape, dtype);
      ops::add_rms_norm_out(x, r, w, 1e-5, sum, normed);
      EXPECT_TRUE(bit_equal(sum, want.sum)) << dtype << shape_str(shape);
      EXPECT_TRUE(bit_equal(normed, want.normed)) << dtype << shape_str(shape);
      // The residual stream updated in place: sum_out is the residual itself.
      const Tensor residual = r.clone();
      ops::add_rms_norm_out(x, residual, w, 1e-5, residual, normed);
      EXPECT_TRUE(bit_equal(residual, want.sum)) << dtype << shape_str(shape);
      EXPECT_TRUE(bit_equal(normed, want.normed)) << dtype << shape_str(shape);
    }
  // A strided residual (a transposed view) is read through its strides.
  const Tensor x = randn_of({6, 5}, 7, DType::F32), rt = randn_of({5, 6}, 8, DType::F32);
  const Tensor w = randn_of({5}, 9, DType::F32, 1.0, 0.5);
  const ops::AddRmsNormResult want = ops::add_rms_norm(x, rt.transpose(0, 1), w, 1e-6);
  const Tensor sum = Tensor::empty({6, 5}), normed = Tensor::empty({6, 5});
  ops::add_rms_norm_out(x, rt.transpose(0, 1), w, 1e-6, sum, normed);
  EXPECT_TRUE(bit_equal(sum, want.sum));
  EXPECT_TRUE(bit_equal(normed, want.normed));
}

TEST(OutForms, LinearMatchesOperator) {
  struct Case {
    Shape x;
    int64_t out;
  };
  // One row (the decode step), several rows, rank-3 inputs, one output feature, in = 1.
  const std::vector<Case> cases = {{{1, 7}, 9}, {{3, 5, 7}, 9}, {{1, 1, 13}, 6}, {{4, 13}, 1},
                                   {{5, 1}, 3}, {{1, 1}, 1},    {{1, 896}, 67},  {{3, 65}, 129}};
  for (DType dtype : kDtypes)
    for (const Case& c : cases)
      for (bool with_bias : {false, true}) {
        const int64_t in = c.x.back();
        const Tensor x = randn_of(c.x, 10, dtype), w = randn_of({c.out, in}, 11, dtype);
        const Tensor b = with_bias ? randn_of({c.out}, 12, dtype) : Tensor();
        Shape out_shape = c.x;
        out_shape.back() = c.out;
        const Tensor out = Tensor::empty(out_shape, dtype);
        ops::linear_out(x, w, b, out);
        EXPECT_TRUE(bit_equal(out, ops::linear(x, w, b)))
            << dtype << " x " << shape_str(c.x) << " out " << c.out << " bias " << with_bias;
      }
}

TEST(OutForms, SiluAndSwigluMatchOperatorsAlsoInPlace) {
  const std::vector<Shape> shapes = {{1}, {7}, {3, 33}, {2, 3, 129}};
  for (DType dtype : kDtypes)
    for (const Shape& shape : shapes) {
      const Tensor gate = randn_of(shape, 13, dtype, 0.0, 3.0), up = randn_of(shape, 14, dtype);
      const Tensor out = Tensor::empty(shape, dtype);
      ops::silu_out(gate, out);
      EXPECT_TRUE(bit_equal(out, ops::silu(gate))) << dtype << shape_str(shape);
      ops::swiglu_out(gate, up, out);
      const Tensor want = ops::swiglu(gate, up);
      EXPECT_TRUE(bit_equal(out, want)) << dtype << shape_str(shape);
      const Tensor in_place = gate.clone();
      ops::swiglu_out(in_place, up, in_place);
      EXPECT_TRUE(bit_equal(in_place, want)) << dtype << shape_str(shape);
    }
}

TEST(OutForms, AddMatchesOperatorForStridedAndInPlaceOperands) {
  const std::vector<Shape> shapes = {{1}, {1, 64}, {3, 7}, {2, 5, 33}};
  for (DType dtype : kDtypes)
    for (const Shape& shape : shapes) {
      const Tensor a = randn_of(shape, 15, dtype), b = randn_of(shape, 16, dtype);
      const Tensor out = Tensor::empty(shape, dtype);
      ops::add_out(a, b, out);
      const Tensor want = ops::add(a, b);
      EXPECT_TRUE(bit_equal(out, want)) << dtype << shape_str(shape);
      const Tensor in_place = b.clone();
      ops::add_out(a, in_place, in_place);
      EXPECT_TRUE(bit_equal(in_place, want)) << dtype << shape_str(shape);
    }
  const Tensor a = randn_of({4, 9}, 17, DType::F32), bt = randn_of({9, 4}, 18, DType::F32);
  const Tensor out = Tensor::empty({4, 9});
  ops::add_out(a, bt.transpose(0, 1), out);
  EXPECT_TRUE(bit_equal(out, ops::add(a, bt.transpose(0, 1))));
}

TEST(OutForms, RopeMatchesOperatorForEveryPositionLayoutAlsoInPlace) {
  const Shape shape = {2, 3, 5, 8};  // (B, H, T, D)
  for (DType dtype : kDtypes) {
    const Tensor x = randn_of(shape, 19, dtype);
    const Tensor freq = ops::rope_inv_freq(8, 10000.0).to(dtype == DType::F64 ? dtype : DType::F32);
    for (DType pos_dtype : {DType::I64, DType::I32}) {
      const Tensor shared = positions_from(11, 5, pos_dtype);  // (T)
      const Tensor per_row =
          Tensor::from_vector(std::vector<int64_t>{0, 1, 2, 3, 4, 40, 41, 42, 43, 44}, {2, 5},
                              pos_dtype);  // (B, T)
      for (const Tensor& pos : {shared, per_row}) {
        const Tensor want = ops::rope(x, pos, freq);
        const Tensor out = Tensor::empty(shape, dtype);
        ops::rope_out(x, pos, freq, out);
        EXPECT_TRUE(bit_equal(out, want)) << dtype << " positions " << pos.describe();
        const Tensor in_place = x.clone();
        ops::rope_out(in_place, pos, freq, in_place);
        EXPECT_TRUE(bit_equal(in_place, want)) << dtype << " positions " << pos.describe();
      }
    }
  }
}

TEST(OutForms, CastOutMatchesCast) {
  const Tensor x = randn_of({3, 7}, 20, DType::F32, 0.0, 100.0);
  for (DType to : {DType::F32, DType::F64, DType::BF16, DType::F16, DType::F8E4M3}) {
    const Tensor out = Tensor::empty({3, 7}, to);
    ops::cast_out(x, out);
    EXPECT_TRUE(bit_equal(out, ops::cast(x, to))) << to;
    const Tensor strided = Tensor::empty({7, 3}, to);
    ops::cast_out(x.transpose(0, 1), strided);
    EXPECT_TRUE(bit_equal(strided, ops::cast(x.transpose(0, 1), to))) << to;
  }
}

TEST(OutForms, NeverRecordAutograd) {
  Tensor x = randn_of({2, 7}, 21, DType::F32), w = randn_of({7}, 22, DType::F32, 1.0, 0.5);
  Tensor r = randn_of({2, 7}, 23, DType::F32), lw = randn_of({5, 7}, 24, DType::F32);
  x.set_requires_grad(true);
  w.set_requires_grad(true);
  r.set_requires_grad(true);
  lw.set_requires_grad(true);
  const Tensor out = Tensor::empty({2, 7}), sum = Tensor::empty({2, 7}), lo = Tensor::empty({2, 5});
  ops::rms_norm_out(x, w, 1e-6, out);
  EXPECT_FALSE(out.requires_grad());
  ops::add_rms_norm_out(x, r, w, 1e-6, sum, out);
  EXPECT_FALSE(sum.requires_grad());
  EXPECT_FALSE(out.requires_grad());
  ops::add_out(x, r, out);
  EXPECT_FALSE(out.requires_grad());
  ops::silu_out(x, out);
  ops::swiglu_out(x, r, out);
  ops::cast_out(x, out);
  EXPECT_FALSE(out.requires_grad());
  ops::linear_out(x, lw, Tensor(), lo);
  EXPECT_FALSE(lo.requires_grad());
  EXPECT_EQ(out.grad_fn(), nullptr);
  EXPECT_EQ(lo.grad_fn(), nullptr);
}

// ---- bad arguments ------------------------------------------------------------------------------

TEST(OutForms, RejectWrongShapeDtypeLayoutAndOverlap) {
  const Tensor x = randn_of({3, 8}, 25, DType::F32), y = randn_of({3, 8}, 26, DType::F32);
  const Tensor w = randn_of({8}, 27, DType::F32), lw = randn_of({5, 8}, 28, DType::F32);
  const Tensor wide = Tensor::empty({8, 3});
  const Tensor strided = wide.transpose(0, 1);  // (3, 8), not dense
  // Wrong shape.
  EXPECT_TRUE(throws_error(
      [&] {
        ops::add_out(x, y, Tensor::empty({3, 7}));
      },
      "add_out", {"'out' f32(3, 7) cpu", "must have the shape of 'a' f32(3, 8) cpu"}));
  EXPECT_TRUE(throws_error(
      [&] {
        ops::linear_out(x, lw, Tensor(), Tensor::empty({3, 8}));
      },
      "linear_out", {"'out' f32(3, 8) cpu", "must have shape (3, 5)"}));
  EXPECT_TRUE(throws_error(
      [&] {
        ops::embedding_out(lw, Tensor::from_vector(std::vector<int64_t>{1, 2}, {2}),
                           Tensor::empty({2, 7}));
      },
      "embedding_out", {"'out' f32(2, 7) cpu", "must have shape (2, 8)"}));
  EXPECT_TRUE(throws_error(
      [&] {
        ops::rms_norm_out(x, w, 1e-6, Tensor::empty({3, 8, 1}));
      },
      "rms_norm_out", {"must have the shape of 'x' f32(3, 8) cpu"}));
  // Not dense.
  EXPECT_TRUE(throws_error([&] { ops::silu_out(x, strided); }, "silu_out",
                           {"'out' must be dense (contiguous)", "strides (1, 3)"}));
  EXPECT_TRUE(throws_error(
      [&] {
        ops::rms_norm_out(strided, w, 1e-6, Tensor::empty({3, 8}));
      },
      "rms_norm_out", {"'x' must be dense (contiguous)"}));
  EXPECT_TRUE(throws_error(
      [&] {
        ops::linear_out(x, lw.transpose(0, 1).contiguous().transpose(0, 1), Tensor(),
                        Tensor::empty({3, 5}));
      },
      "linear_out", {"'weight' must be dense (contiguous)"}));
  // Wrong dtype: out in another dtype, and bf16 operands on the CPU.
  EXPECT_TRUE(throws_error(
      [&] {
        ops::add_out(x, y, Tensor::empty({3, 8}, DType::F64));
      },
      "add_out", {"'out' f64(3, 8) cpu must have the dtype and device of 'a' f32(3, 8) cpu"}));
  const Tensor xb = x.to(DType::BF16);
  EXPECT_TRUE(throws_error(
      [&] {
        ops::swiglu_out(xb, xb, Tensor::empty({3, 8}, DType::BF16));
      },
      "swiglu_out",
      {"'gate' must be f32 or f64 on the CPU", "swiglu_out widens bf16 and f16", "bf16(3, 8)"}));
  EXPECT_TRUE(throws_error(
      [&] {
        ops::rope_out(randn_of({1, 2, 3, 4}, 1, DType::F32), positions_from(0, 3, DType::I64),
                      ops::rope_inv_freq(4, 1e4).to(DType::F64), Tensor::empty({1, 2, 3, 4}));
      },
      "rope_out", {"inv_freq must be f32 on cpu", "found f64(2,) cpu"}));
  // Undefined out.
  EXPECT_TRUE(throws_error([&] { ops::cast_out(x, Tensor()); }, "cast_out",
                           {"argument 'out' is undefined"}));
  // Overlap: out partly over an input, normed_out onto the sum, linear in place.
  const Tensor buffer = Tensor::empty({4, 8});
  EXPECT_TRUE(throws_error([&] { ops::add_out(buffer.narrow(0, 0, 3), y, buffer.narrow(0, 1, 3)); },
                           "add_out", {"'out' f32(3, 8) cpu partly overlaps 'a' f32(3, 8) cpu"}));
  const Tensor sum = Tensor::empty({3, 8});
  EXPECT_TRUE(throws_error([&] { ops::add_rms_norm_out(x, y, w, 1e-6, sum, sum); },
                           "add_rms_norm_out",
                           {"'normed_out' f32(3, 8) cpu overlaps 'sum_out'", "separate memory"}));
  const Tensor square = randn_of({8, 8}, 29, DType::F32), xs = x.clone();
  EXPECT_TRUE(throws_error([&] { ops::linear_out(xs, square, Tensor(), xs); }, "linear_out",
                           {"'out' f32(3, 8) cpu overlaps 'x'"}));
  // Host ids are still range-checked.
  EXPECT_TRUE(throws_error(
      [&] {
        ops::embedding_out(lw, Tensor::from_vector(std::vector<int64_t>{1, 5}, {2}),
                           Tensor::empty({2, 8}));
      },
      "embedding_out", {"id 5 at flat position 1 is outside [0, 5)"}));
}

// ---- no heap allocation -------------------------------------------------------------------------

TEST(OutForms, MakeNoHeapAllocationForF32OnceWarm) {
  const DType f32 = DType::F32;
  const int64_t C = 64, F = 96, V = 50, H = 2, D = 32;
  const Tensor table = randn_of({V, C}, 30, f32);
  const Tensor ids = Tensor::from_vector(std::vector<int64_t>{7, 3, 49}, {3});
  const Tensor x = Tensor::empty({3, C}), residual = randn_of({3, C}, 31, f32);
  const Tensor norm_w = randn_of({C}, 32, f32, 1.0, 0.5), normed = Tensor::empty({3, C});
  const Tensor gate_up_w = randn_of({2 * F, C}, 33, f32), bias = randn_of({2 * F}, 34, f32);
  const Tensor gate_up = Tensor::empty({3, 2 * F});
  const Tensor gate = Tensor::empty({3, F}), up = Tensor::empty({3, F}),
               act = Tensor::empty({3, F});
  const Tensor q = randn_of({1, H, 3, D}, 35, f32), q_rot = Tensor::empty({1, H, 3, D});
  const Tensor positions = positions_from(5, 3, DType::I32);
  const Tensor freq = ops::rope_inv_freq(D, 1e4);
  const Tensor half = Tensor::empty({3, C}, DType::BF16);
  // The decode-sized products of the measurement in the report, and an add large enough
  // for the parallel strided loop.
  const Tensor big_w = randn_of({896, 896}, 36, f32), big_x = randn_of({1, 896}, 37, f32);
  const Tensor big_y = Tensor::empty({1, 896});
  const Tensor long_a = randn_of({4, 16384}, 38, f32), long_out = Tensor::empty({4, 16384});
  // Views of the fused gate/up output are made once, outside the counted scope.
  const Tensor gate_view = gate_up.narrow(1, 0, F), up_view = gate_up.narrow(1, F, F);
  const auto calls = [&] {
    ops::embedding_out(table, ids, x);
    ops::add_rms_norm_out(x, residual, norm_w, 1e-6, residual, normed);
    ops::rms_norm_out(residual, norm_w, 1e-6, normed);
    ops::linear_out(normed, gate_up_w, bias, gate_up);
    ops::linear_out(normed, gate_up_w, Tensor(), gate_up);
    ops::add_out(gate_view, up_view, gate);  // strided operands
    ops::silu_out(gate, act);
    ops::swiglu_out(gate, act, up);
    ops::rope_out(q, positions, freq, q_rot);
    ops::rope_out(q_rot, positions, freq, q_rot);
    ops::cast_out(residual, half);
    ops::linear_out(big_x, big_w, Tensor(), big_y);
    ops::add_out(long_a, long_a, long_out);
  };
  calls();  // warm-up: OpenMP and OpenBLAS threads start here
  calls();
  int64_t allocations = 0;
  {
    AllocationCount count;
    for (int i = 0; i < 3; ++i) calls();
    allocations = count.stop();
  }
  EXPECT_EQ(allocations, 0);
  // The counter itself sees the allocation an autograd operator makes.
  int64_t operator_allocations = 0;
  {
    AllocationCount count;
    const Tensor sum = ops::add(residual, residual);
    operator_allocations = count.stop();
  }
  EXPECT_GT(operator_allocations, 0);
}
