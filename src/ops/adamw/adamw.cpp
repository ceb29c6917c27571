// adamw_step and sum_of_squares: validation and dispatch (kernels in adamw_cpu.cpp and
// adamw_cuda.cu).
#include "microllm/ops/adamw.h"

#include "../common.h"
#include "adamw_kernels.h"

namespace microllm::ops {
namespace {

void check_state(const Tensor& t, const char* what, const Tensor& param, size_t index) {
  MICROLLM_CHECK(t.defined() && t.dtype() == DType::F32 && t.shape() == param.shape() &&
                     t.is_contiguous() && t.device() == param.device(),
                 "adamw_step", "tensor ", index, ": ", what, " must be dense f32 of the shape ",
                 "and device of param ", param.describe(), ", found ",
                 t.defined() ? t.describe() : std::string("undefined"));
}

}  // namespace

void adamw_step(const std::vector<AdamWTensors>& tensors, const AdamWScalars& scalars) {
  if (tensors.empty()) return;
  const Device device = tensors.front().param.device();
  for (size_t i = 0; i < tensors.size(); ++i) {
    const AdamWTensors& t = tensors[i];
    MICROLLM_CHECK(t.param.defined() && is_floating(t.param.dtype()) &&
                       t.param.dtype() != DType::F64 && t.param.is_contiguous(),
                   "adamw_step", "tensor ", i, ": param must be dense f32, bf16 or f16, found ",
                   t.param.defined() ? t.param.describe() : std::string("undefined"));
    MICROLLM_CHECK(t.param.device() == device, "adamw_step", "tensor ", i, ": param ",
                   t.param.describe(), " is not on ", device, " like tensor 0");
    MICROLLM_CHECK(t.grad.defined() && t.grad.dtype() == t.param.dtype() &&
                       t.grad.shape() == t.param.shape() && t.grad.is_contiguous() &&
                       t.grad.device() == device,
                   "adamw_step", "tensor ", i, ": grad must be dense like param ",
                   t.param.describe(), ", found ",
                   t.grad.defined() ? t.grad.describe() : std::string("undefined"));
    check_state(t.master, "master", t.param, i);
    check_state(t.exp_avg, "exp_avg", t.param, i);
    check_state(t.exp_avg_sq, "exp_avg_sq", t.param, i);
  }
  MICROLLM_CHECK(scalars.bias1 > 0 && scalars.bias2 > 0, "adamw_step",
                 "bias corrections must be positive, found ", scalars.bias1, " and ",
                 scalars.bias2);
  MICROLLM_KERNEL(device, adamw_step, tensors, scalars);
}

Tensor sum_of_squares(const std::vector<Tensor>& tensors) {
  const Device device = tensors.empty() ? Device::cpu() : tensors.front().device();
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    MICROLLM_CHECK(t.defined() && is_floating(t.dtype()) && t.dtype() != DType::F64 &&
                       t.is_contiguous() && t.device() == device,
                   "sum_of_squares", "tensor ", i, " must be dense f32, bf16 or f16 on ", device,
                   ", found ", t.defined() ? t.describe() : std::string("undefined"));
  }
  Tensor out = Tensor::zeros({}, DType::F32, device);  // ()
  if (!tensors.empty()) MICROLLM_KERNEL(device, sum_of_squares, tensors, out);
  return out;
}

}  // namespace microllm::ops
