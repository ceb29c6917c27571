// Small helpers shared by the operator tests: building tensors from host values, comparing
// against references computed in the test, and checking that an Error names what it should.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "microllm/core/error.h"
#include "microllm/core/random.h"
#include "microllm/core/tensor.h"

// A nested namespace so these inline helpers never collide with other test helpers.
namespace microllm::testing::optest {

// A dense F64 tensor (no gradient) holding `values`.
inline Tensor f64(const std::vector<double>& values, const Shape& shape) {
  return Tensor::from_vector(values, shape, DType::F64);
}

// An integer id tensor of `dtype` (I64 by default).
inline Tensor ids(const std::vector<int64_t>& values, const Shape& shape,
                  DType dtype = DType::I64) {
  return Tensor::from_vector(values, shape, dtype);
}

// Normal samples of `dtype`, no gradient.
inline Tensor randn_tensor(const Shape& shape, uint64_t seed, DType dtype = DType::F64,
                           double mean = 0.0, double std = 1.0) {
  Generator gen(seed);
  return randn(shape, gen, dtype, Device::cpu(), mean, std);
}

// A dense F64 leaf with uniform samples in [low, high) that requires a gradient (for ops
// that need positive inputs: log, sqrt, rsqrt, a divisor).
inline Tensor uniform_leaf(const Shape& shape, uint64_t seed, double low, double high) {
  Generator gen(seed);
  Tensor t = rand_uniform(shape, gen, low, high, DType::F64);
  t.set_requires_grad(true);
  return t;
}

// Element-wise |got − want| ≤ atol + rtol·|want|, reporting the first few offenders.
inline ::testing::AssertionResult all_close(const std::vector<double>& got,
                                            const std::vector<double>& want, double atol,
                                            double rtol = 0.0) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << "size " << got.size() << " vs expected " << want.size();
  int bad = 0;
  std::string detail;
  for (size_t i = 0; i < got.size(); ++i) {
    const double diff = std::fabs(got[i] - want[i]);
    if (!(diff <= atol + rtol * std::fabs(want[i]))) {
      if (bad++ < 6)
        detail += "\n  [" + std::to_string(i) + "] got " + std::to_string(got[i]) + " want " +
                  std::to_string(want[i]);
    }
  }
  if (bad)
    return ::testing::AssertionFailure() << bad << " of " << got.size() << " differ:" << detail;
  return ::testing::AssertionSuccess();
}

inline ::testing::AssertionResult all_close(const Tensor& got, const std::vector<double>& want,
                                            double atol, double rtol = 0.0) {
  return all_close(got.to_vector_f64(), want, atol, rtol);
}

// a and b hold the same bits: dtype, shape and every byte (any devices, any strides).
inline ::testing::AssertionResult same_bits(const Tensor& a, const Tensor& b) {
  const Tensor x = a.to(Device::cpu()).contiguous(), y = b.to(Device::cpu()).contiguous();
  if (x.dtype() != y.dtype() || x.shape() != y.shape())
    return ::testing::AssertionFailure() << x.describe() << " vs " << y.describe();
  if (std::memcmp(x.raw_data(), y.raw_data(), x.nbytes()) != 0)
    return ::testing::AssertionFailure() << "the bits of " << x.describe() << " differ";
  return ::testing::AssertionSuccess();
}

// Runs `fn`, expecting a microllm::Error whose op() is `op` and whose message contains every
// string of `parts` (the shapes, dtypes or values the caller got wrong).
inline ::testing::AssertionResult throws_op_error(const std::function<void()>& fn,
                                                  const std::string& op,
                                                  const std::vector<std::string>& parts) {
  try {
    fn();
  } catch (const Error& e) {
    const std::string what = e.what();
    if (e.op() != op)
      return ::testing::AssertionFailure()
             << "error from '" << e.op() << "', expected '" << op << "': " << what;
    for (const std::string& part : parts)
      if (what.find(part) == std::string::npos)
        return ::testing::AssertionFailure() << "message lacks \"" << part << "\": " << what;
    return ::testing::AssertionSuccess();
  } catch (const std::exception& e) {
    return ::testing::AssertionFailure() << "threw a non-microllm exception: " << e.what();
  }
  return ::testing::AssertionFailure() << "did not throw (expected an error from '" << op << "')";
}

}  // namespace microllm::testing::optest

// EXPECT_ERROR(statement, "op", {"part", ...}): `statement` throws microllm::Error from `op`
// with every part in its message.
#define EXPECT_ERROR(statement, op, ...) \
  EXPECT_TRUE(                           \
      ::microllm::testing::optest::throws_op_error([&]() { (void)(statement); }, op, __VA_ARGS__))
