// ops::matmul_out against ops::matmul: the same bits written into a given tensor (F32, F64,
// BF16; every transpose; 2-D and batched operands; an out at an offset in a larger buffer;
// K = 0), and its errors.
#include <gtest/gtest.h>

#include <limits>
#include <string>

#include "microllm/ops/ops.h"
#include "ops/op_test_util.h"

using namespace microllm;
using microllm::testing::optest::randn_tensor;
using microllm::testing::optest::same_bits;

namespace {

// op(x) (rows, cols) stored as (cols, rows) when transposed; a leading batch when batch > 0.
Shape stored(int64_t rows, int64_t cols, bool trans, int64_t batch) {
  Shape s = trans ? Shape{cols, rows} : Shape{rows, cols};
  if (batch > 0) s.insert(s.begin(), batch);
  return s;
}

// A dense tensor of `shape` that starts `offset` elements into a NaN-filled buffer.
Tensor poisoned_out(const Shape& shape, DType dtype, int64_t offset) {
  int64_t numel = 1;
  for (int64_t s : shape) numel *= s;
  Tensor buffer = Tensor::empty({offset + numel + 3}, dtype);  // (offset + numel + 3)
  buffer.fill(std::numeric_limits<double>::quiet_NaN());
  return buffer.narrow(0, offset, numel).view(shape);
}

}  // namespace

TEST(MatmulOut, GivesTheBitsOfMatmul) {
  struct Case {
    int64_t batch_a, batch_b, m, k, n;
  };
  const Case cases[] = {{0, 0, 3, 5, 7},  {0, 0, 17, 33, 65}, {0, 0, 1, 64, 1},
                        {0, 0, 64, 7, 1}, {4, 4, 5, 6, 3},    {3, 0, 9, 4, 8},
                        {0, 2, 7, 3, 11}, {0, 0, 3, 0, 4},    {2, 2, 2, 0, 5}};
  uint64_t seed = 1;
  for (DType dtype : {DType::F32, DType::F64, DType::BF16})
    for (const Case& c : cases)
      for (bool ta : {false, true})
        for (bool tb : {false, true}) {
          const Tensor a = randn_tensor(stored(c.m, c.k, ta, c.batch_a), seed++, dtype);
          const Tensor b = randn_tensor(stored(c.k, c.n, tb, c.batch_b), seed++, dtype);
          const Tensor want = ops::matmul(a, b, ta, tb);
          const Tensor out = poisoned_out(want.shape(), dtype, 5);
          ops::matmul_out(a, b, ta, tb, out);
          EXPECT_TRUE(same_bits(out, want))
              << dtype << " batch " << c.batch_a << "/" << c.batch_b << " " << c.m << "x" << c.k
              << "x" << c.n << (ta ? " ta" : "") << (tb ? " tb" : "");
        }
}

TEST(MatmulOut, RecordsNoGradient) {
  Tensor a = randn_tensor({3, 4}, 1, DType::F64);
  a.set_requires_grad(true);
  const Tensor b = randn_tensor({4, 2}, 2, DType::F64);
  const Tensor out = Tensor::empty({3, 2}, DType::F64);
  ops::matmul_out(a, b, false, false, out);
  EXPECT_FALSE(out.requires_grad());
}

TEST(BadInput, MatmulOut) {
  const Tensor a = Tensor::zeros({2, 3}), b = Tensor::zeros({3, 4});
  EXPECT_ERROR(ops::matmul_out(a, b, false, false, Tensor::zeros({2, 5})), "matmul_out",
               {"f32(2, 5)", "(2, 4)"});
  EXPECT_ERROR(ops::matmul_out(a, b, false, false, Tensor::zeros({2, 4}, DType::F64)), "matmul_out",
               {"f64(2, 4)", "dtype"});
  EXPECT_ERROR(ops::matmul_out(a, b, false, false, Tensor::zeros({4, 2}).transpose(0, 1)),
               "matmul_out", {"dense"});
  EXPECT_ERROR(ops::matmul_out(a, Tensor::zeros({4, 3}), false, false, Tensor::zeros({2, 3})),
               "matmul_out", {"K=3", "K=4"});
  const Tensor shared = Tensor::zeros({2, 3});  // out over a's memory
  EXPECT_ERROR(ops::matmul_out(shared, Tensor::zeros({3, 3}), false, false, shared), "matmul_out",
               {"overlaps", "separate"});
  EXPECT_ERROR(ops::matmul_out(a, b, false, false, Tensor()), "matmul_out", {"out"});
}
