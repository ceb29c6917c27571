// Tensor::arange, written by the backend in place (no host staging): values and dtypes
// against the same integers built on the host and converted by copy_from.
#include <gtest/gtest.h>

#include <vector>

#include "core/expect_error.h"
#include "microllm/core/tensor.h"

using namespace microllm;
using microllm::testing::throws_error;

TEST(Arange, MatchesHostIntegersConvertedToEveryDtype) {
  for (DType dtype : kAllDTypes) {
    // Past 256 (where BF16 and FP8 start rounding), except where 8-bit integers would wrap.
    const int64_t n = dtype == DType::I8 || dtype == DType::U8 ? 100 : 300;
    std::vector<int64_t> host(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) host[i] = i;
    const Tensor reference = Tensor::from_vector(host, {n});  // (n) I64
    const Tensor t = Tensor::arange(n, dtype);                // (n)
    EXPECT_EQ(t.dtype(), dtype);
    EXPECT_EQ(t.shape(), Shape{n});
    EXPECT_EQ(t.to_vector_f64(), reference.to(dtype).to_vector_f64()) << dtype;
  }
  EXPECT_EQ(Tensor::arange(0).numel(), 0);
  EXPECT_TRUE(throws_error([] { Tensor::arange(-2); }, "Tensor::arange", {"-2"}));
}
