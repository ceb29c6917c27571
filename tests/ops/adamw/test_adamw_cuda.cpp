// CUDA multi-tensor AdamW and sum of squares against the CPU op: 40 tensors (more than one
// launch's batch), sizes around the 4096-element chunk, F32 and BF16 parameters, weight decay
// on some, a clip scale: the same bits as the CPU, also in runs of four over views at any
// offset; the sum of squares within F32 rounding of the CPU's and the same bits on every call.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cuda/cuda_test_utils.h"
#include "microllm/core/random.h"
#include "microllm/ops/adamw.h"
#include "support/scoped_env.h"

using namespace microllm;
using microllm::testing::bit_equal;

namespace {

Tensor random(const Shape& shape, uint64_t seed, DType dtype, double std) {
  Generator gen(seed);
  std::vector<double> values(static_cast<size_t>(shape_numel(shape)));
  for (double& v : values) v = gen.next_normal() * std;
  return Tensor::from_vector(values, shape, DType::F64).to(dtype);
}

// One parameter's five tensors on `device`, from the same host values for every device.
ops::AdamWTensors parameter(int64_t n, uint64_t seed, DType dtype, Device device) {
  const Tensor master = random({n}, seed, DType::F32, 1.0);
  ops::AdamWTensors t;
  t.master = master.to(device);
  t.param = dtype == DType::F32 ? t.master : master.to(dtype).to(device);
  t.grad = random({n}, seed + 1, dtype, 0.1).to(device);
  t.exp_avg = random({n}, seed + 2, DType::F32, 0.01).to(device);
  Generator gen(seed + 3);
  std::vector<double> second(static_cast<size_t>(n));  // (n) ≥ 0, as a second moment is
  for (double& v : second) v = 1e-4 * gen.next_uniform();
  t.exp_avg_sq = Tensor::from_vector(second, {n}, DType::F32).to(device);
  t.decay = seed % 3 != 0;
  return t;
}

}  // namespace

TEST(CudaFusedAdamW, GivesTheCpuBitsAcrossBatches) {
  MICROLLM_REQUIRE_CUDA();
  const std::vector<int64_t> sizes = {1, 7, 4095, 4096, 4097, 10000, 65536 + 3};
  for (DType dtype : {DType::F32, DType::BF16}) {
    std::vector<ops::AdamWTensors> cpu, gpu;
    for (int i = 0; i < 40; ++i) {
      const int64_t n = sizes[i % sizes.size()];
      cpu.push_back(parameter(n, 10 * i, dtype, Device::cpu()));
      gpu.push_back(parameter(n, 10 * i, dtype, Device::cuda(0)));
    }
    ops::AdamWScalars s;
    s.lr = 3e-3;
    s.weight_decay = 0.1;
    s.bias1 = 1 - 0.9 * 0.9;
    s.bias2 = 1 - 0.95 * 0.95;
    for (double scale : {1.0, 0.43}) {
      s.grad_scale = scale;
      ops::adamw_step(cpu, s);
      ops::adamw_step(gpu, s);
    }
    for (size_t i = 0; i < cpu.size(); ++i) {
      EXPECT_TRUE(bit_equal(gpu[i].master, cpu[i].master)) << dtype << " tensor " << i;
      EXPECT_TRUE(bit_equal(gpu[i].exp_avg, cpu[i].exp_avg)) << dtype << " tensor " << i;
      EXPECT_TRUE(bit_equal(gpu[i].exp_avg_sq, cpu[i].exp_avg_sq)) << dtype << " tensor " << i;
      EXPECT_TRUE(bit_equal(gpu[i].param, cpu[i].param)) << dtype << " tensor " << i;
    }
  }
}

TEST(CudaFusedAdamW, SumOfSquaresMatchesTheCpuAndRepeats) {
  MICROLLM_REQUIRE_CUDA();
  std::vector<Tensor> cpu, gpu;
  for (int i = 0; i < 45; ++i) {
    const DType dtype = i % 2 ? DType::BF16 : DType::F32;  // batches split where dtypes change
    cpu.push_back(random({1000 * i + 13}, i, dtype, 0.5));
    gpu.push_back(cpu.back().to(Device::cuda(0)));
  }
  const double want = ops::sum_of_squares(cpu).item();
  const Tensor got = ops::sum_of_squares(gpu);
  EXPECT_NEAR(got.item(), want, 1e-5 * want);
  EXPECT_TRUE(bit_equal(ops::sum_of_squares(gpu), got));
}

// Parameters as views into flat buffers at offsets of 0–3 elements, so that some tensors
// cannot take runs of four and the others start their runs mid-buffer: with runs of four (the
// default) and one element at a time (MICROLLM_ADAMW_RUNS=0), the CPU's bits.
TEST(CudaFusedAdamW, RunsOfFourGiveTheCpuBitsOnOffsetViews) {
  MICROLLM_REQUIRE_CUDA();
  for (const char* runs : {"0", "1"}) {
    const microllm::testing::ScopedEnv env("MICROLLM_ADAMW_RUNS", runs);
    for (DType dtype : {DType::F32, DType::BF16}) {
      std::vector<ops::AdamWTensors> cpu, gpu;
      for (int i = 0; i < 12; ++i) {
        const int64_t offset = i % 4, n = std::vector<int64_t>{5, 4097, 12289}[i % 3];
        const ops::AdamWTensors whole = parameter(n + offset, 7 * i + 1, dtype, Device::cuda(0));
        ops::AdamWTensors view;  // elements [offset, offset + n) of each buffer, (n)
        view.master = whole.master.narrow(0, offset, n);
        view.param = dtype == DType::F32 ? view.master : whole.param.narrow(0, offset, n);
        view.grad = whole.grad.narrow(0, offset, n);
        view.exp_avg = whole.exp_avg.narrow(0, offset, n);
        view.exp_avg_sq = whole.exp_avg_sq.narrow(0, offset, n);
        view.decay = whole.decay;
        gpu.push_back(view);
        ops::AdamWTensors host;
        host.master = view.master.to(Device::cpu());
        host.param = dtype == DType::F32 ? host.master : view.param.to(Device::cpu());
        host.grad = view.grad.to(Device::cpu());
        host.exp_avg = view.exp_avg.to(Device::cpu());
        host.exp_avg_sq = view.exp_avg_sq.to(Device::cpu());
        host.decay = view.decay;
        cpu.push_back(host);
      }
      ops::AdamWScalars s;
      s.lr = 1e-3;
      s.weight_decay = 0.1;
      s.bias1 = 1 - 0.9;
      s.bias2 = 1 - 0.95;
      for (double scale : {1.0, 0.61}) {
        s.grad_scale = scale;
        ops::adamw_step(cpu, s);
        ops::adamw_step(gpu, s);
      }
      for (size_t i = 0; i < cpu.size(); ++i) {
        const std::string where = std::string("runs=") + runs + " " +
                                  std::string(dtype_name(dtype)) + " tensor " + std::to_string(i);
        EXPECT_TRUE(bit_equal(gpu[i].master, cpu[i].master)) << where;
        EXPECT_TRUE(bit_equal(gpu[i].exp_avg, cpu[i].exp_avg)) << where;
        EXPECT_TRUE(bit_equal(gpu[i].exp_avg_sq, cpu[i].exp_avg_sq)) << where;
        EXPECT_TRUE(bit_equal(gpu[i].param, cpu[i].param)) << where;
      }
    }
  }
}
