// gemv_out: validation and dispatch of the decode projection (see matmul.h).
#include <cstdint>

#include "../common.h"
#include "matmul_kernels.h"
#include "microllm/ops/matmul.h"

namespace microllm::ops {
namespace {

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

bool gemv_supported(Device device, DType dtype, int64_t rows, int64_t in) {
  if (rows < 1 || rows > kGemvMaxRows || in < 1) return false;
  if (!device.is_cuda()) return dtype == DType::F32 || dtype == DType::F64;
  if (dtype != DType::F32 && dtype != DType::BF16 && dtype != DType::F16) return false;
  const auto per_16_bytes = static_cast<int64_t>(16 / dtype_size(dtype));
  return in % per_16_bytes == 0;
}

void gemv_out(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& out,
              GemvEpilogue epilogue) {
  const char* op = "gemv_out";
  const bool swiglu = epilogue == GemvEpilogue::swiglu;
  detail::check_out_dtype(op, x, "x");
  detail::check_dense(op, x, "x");
  detail::check_defined(op, weight, "weight");
  detail::check_same_dtype(op, x, "x", weight, "weight");
  detail::check_same_device(op, x, "x", weight, "weight");
  detail::check_dense(op, weight, "weight");
  MICROLLM_CHECK(x.dim() == 2 && weight.dim() == 2 && x.size(1) == weight.size(1), op,
                 "expected x (M, in) and weight (out, in), found x ", x.describe(), " and weight ",
                 weight.describe());
  const int64_t M = x.size(0), K = x.size(1);
  MICROLLM_CHECK(gemv_supported(x.device(), x.dtype(), M, K), op, "takes 1 to ", kGemvMaxRows,
                 " rows of x", x.is_cuda() ? " with in a multiple of 16 bytes of elements" : "",
                 ", found x ", x.describe());
  MICROLLM_CHECK(!swiglu || weight.size(0) % 2 == 0, op,
                 "the swiglu epilogue takes the fused (2F, in) gate/up weight, found ",
                 weight.describe());
  const int64_t N = swiglu ? weight.size(0) / 2 : weight.size(0);
  if (bias.defined()) {
    MICROLLM_CHECK(!swiglu, op, "the swiglu epilogue takes no bias, found ", bias.describe());
    detail::check_same_dtype(op, x, "x", bias, "bias");
    detail::check_same_device(op, x, "x", bias, "bias");
    detail::check_dense(op, bias, "bias");
    MICROLLM_CHECK(bias.dim() == 1 && bias.size(0) == N, op, "bias must be (", N, "), found ",
                   bias.describe());
  }
  detail::check_out_tensor(op, out, "out", x, "x");
  detail::check_out_shape(op, out, "out", x, 1, N);
  detail::check_apart(op, out, "out", x, "x");
  detail::check_apart(op, out, "out", weight, "weight");
  detail::check_apart(op, out, "out", bias, "bias");
  if (x.is_cuda())
    MICROLLM_CHECK(
        aligned16(x.raw_data()) && aligned16(weight.raw_data()) && aligned16(out.raw_data()), op,
        "CUDA operands must start at 16-byte aligned addresses, found x at ", x.raw_data(),
        ", weight at ", weight.raw_data(), ", out at ", out.raw_data());
  MICROLLM_KERNEL(x.device(), gemv, x, weight, bias, out, swiglu);
}

}  // namespace microllm::ops
