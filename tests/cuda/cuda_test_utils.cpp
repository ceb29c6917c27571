// CUDA-vs-CPU comparison helpers (see cuda_test_utils.h).
#include "cuda/cuda_test_utils.h"

#include <cmath>
#include <cstring>
#include <sstream>

#include "microllm/core/random.h"
#include "microllm/ops/elementwise.h"
#include "microllm/ops/reduce.h"

namespace microllm::testing {

::testing::AssertionResult bit_equal(const Tensor& got, const Tensor& want) {
  if (got.dtype() != want.dtype() || got.shape() != want.shape())
    return ::testing::AssertionFailure() << got.describe() << " vs " << want.describe();
  const auto host = [](const Tensor& t) {
    Tensor h = Tensor::empty(t.shape(), t.dtype());
    h.copy_from(t.contiguous());
    return h;
  };
  const Tensor g = host(got), w = host(want);
  if (g.numel() == 0 || std::memcmp(g.raw_data(), w.raw_data(), g.nbytes()) == 0)
    return ::testing::AssertionSuccess();
  const std::vector<double> gv = g.to_vector_f64(), wv = w.to_vector_f64();
  for (size_t i = 0; i < gv.size(); ++i)
    if (std::memcmp(&gv[i], &wv[i], sizeof(double)) != 0)
      return ::testing::AssertionFailure() << "element " << i << ": " << gv[i] << " vs " << wv[i]
                                           << " (" << got.describe() << ")";
  return ::testing::AssertionFailure() << "bytes differ";
}

double relative_l2(const Tensor& a, const Tensor& b) {
  const std::vector<double> x = a.to_vector_f64(), y = b.to_vector_f64();
  double diff = 0.0, norm = 0.0;
  for (size_t i = 0; i < x.size(); ++i) {
    diff += (x[i] - y[i]) * (x[i] - y[i]);
    norm += y[i] * y[i];
  }
  if (norm == 0.0) return std::sqrt(diff);
  return std::sqrt(diff / norm);
}

double tolerance_ratio(const Tensor& a, const Tensor& b, double atol, double rtol) {
  const std::vector<double> x = a.to_vector_f64(), y = b.to_vector_f64();
  double worst = 0.0;
  for (size_t i = 0; i < x.size(); ++i) {
    if (std::isnan(x[i]) != std::isnan(y[i])) return INFINITY;
    if (std::isnan(x[i])) continue;
    worst = std::max(worst, std::fabs(x[i] - y[i]) / (atol + rtol * std::fabs(y[i])));
  }
  return worst;
}

namespace {
std::string compare(const char* what, const Tensor& cuda, const Tensor& cpu,
                    const CudaCheckOptions& o) {
  std::ostringstream out;
  if (!cuda.defined() || !cpu.defined()) {
    if (cuda.defined() != cpu.defined()) out << what << ": defined on one side only";
    return out.str();
  }
  if (cuda.shape() != cpu.shape()) {
    out << what << ": shape " << shape_str(cuda.shape()) << " vs CPU " << shape_str(cpu.shape());
    return out.str();
  }
  if (!cuda.is_cuda()) {
    out << what << ": result is on " << cuda.device() << ", expected CUDA";
    return out.str();
  }
  if (o.dtype == DType::F32) {
    const double ratio = tolerance_ratio(cuda, cpu, o.atol, o.rtol);
    if (!(ratio <= 1.0))
      out << what << ": outside atol " << o.atol << " rtol " << o.rtol << " (worst ratio " << ratio
          << ")";
  } else {
    const double rel = relative_l2(cuda, cpu);
    if (!(rel <= o.bf16_rel_l2)) out << what << ": relative L2 " << rel << " > " << o.bf16_rel_l2;
  }
  return out.str();
}
}  // namespace

::testing::AssertionResult cuda_matches_cpu(const OpFn& fn, const std::vector<Tensor>& inputs,
                                            const CudaCheckOptions& o) {
  std::vector<Tensor> cpu_in, cuda_in;
  for (const Tensor& t : inputs) {
    if (!t.defined()) {
      cpu_in.emplace_back();
      cuda_in.emplace_back();
      continue;
    }
    const bool grad = t.requires_grad() && o.check_backward;
    if (is_floating(t.dtype())) {
      Tensor rounded = t.detach().to(o.dtype).to(DType::F32);  // the values both sides see
      Tensor c = rounded.clone();
      Tensor g = rounded.to(o.dtype).to(Device::cuda(0));
      if (grad) {
        c.set_requires_grad(true);
        g.set_requires_grad(true);
      }
      cpu_in.push_back(c);
      cuda_in.push_back(g);
    } else {
      cpu_in.push_back(t);
      cuda_in.push_back(t.to(Device::cuda(0)));
    }
  }
  const Tensor cpu_out = fn(cpu_in);
  const Tensor cuda_out = fn(cuda_in);
  std::string problems = compare("forward", cuda_out, cpu_out, o);
  if (o.check_backward && cpu_out.requires_grad()) {
    Generator gen(o.seed);
    const Tensor grad = randn(cpu_out.shape(), gen).to(o.dtype).to(DType::F32);
    cpu_out.backward(grad);
    cuda_out.backward(grad.to(cuda_out.dtype()).to(Device::cuda(0)));
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (!cpu_in[i].defined() || !cpu_in[i].requires_grad()) continue;
      const std::string name = "grad of input " + std::to_string(i);
      const std::string p = compare(name.c_str(), cuda_in[i].grad(), cpu_in[i].grad(), o);
      if (!p.empty()) problems += (problems.empty() ? "" : "; ") + p;
    }
  }
  if (!problems.empty()) return ::testing::AssertionFailure() << problems;
  return ::testing::AssertionSuccess();
}

Tensor cuda_test_leaf(const Shape& shape, uint64_t seed, double mean, double std) {
  Generator gen(seed);
  Tensor t = randn(shape, gen, DType::F32, Device::cpu(), mean, std);
  t.set_requires_grad(true);
  return t;
}

CudaCheckOptions options_in(DType dtype) {
  CudaCheckOptions o;
  o.dtype = dtype;
  return o;
}

}  // namespace microllm::testing
