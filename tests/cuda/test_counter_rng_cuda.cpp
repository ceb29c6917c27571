// The counter-based generator (core/counter_rng.h) compiled into a CUDA kernel
// (ops::counter_random) gives the host's bits: 64-bit draws and both uniform conversions,
// bit for bit, over 100,003 lanes for seeds and positions at the edges of their ranges.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "cuda/cuda_test_utils.h"
#include "microllm/core/counter_rng.h"
#include "microllm/ops/sampling.h"

using namespace microllm;

TEST(CounterRngCuda, DeviceDrawsEqualHostDrawsBitForBit) {
  MICROLLM_REQUIRE_CUDA();
  const Device gpu = Device::cuda(0);
  const int64_t batch = 5, lanes = 100003;
  const std::vector<int64_t> seeds = {0, -1, 1, 0x7fffffffffffffffll, 0x243f6a8885a308d3ll};
  const std::vector<int64_t> positions = {0, 1, -1, 2147483647, 123456};
  for (DType position_dtype : {DType::I32, DType::I64}) {
    const Tensor s = Tensor::from_vector(seeds, {batch}, DType::I64, gpu);
    const Tensor p = Tensor::from_vector(positions, {batch}, position_dtype, gpu);
    for (DType out_dtype : {DType::I64, DType::F32, DType::F64}) {
      Tensor out = Tensor::empty({batch, lanes}, out_dtype, gpu);
      ops::counter_random(s, p, out);
      const Tensor host = out.to(Device::cpu());
      int64_t mismatches = 0;
      for (int64_t b = 0; b < batch; ++b) {
        const uint64_t seed = static_cast<uint64_t>(seeds[b]);
        const uint64_t pos = static_cast<uint64_t>(positions[b]);
        for (int64_t v = 0; v < lanes; ++v) {
          const uint64_t lane = static_cast<uint64_t>(v);
          const int64_t at = b * lanes + v;
          bool same = true;
          if (out_dtype == DType::I64)
            same = static_cast<uint64_t>(host.data<int64_t>()[at]) == counter_u64(seed, pos, lane);
          else if (out_dtype == DType::F32)
            same = host.data<float>()[at] == counter_uniform_f32(seed, pos, lane);
          else
            same = host.data<double>()[at] == counter_uniform_f64(seed, pos, lane);
          mismatches += !same;
        }
      }
      EXPECT_EQ(mismatches, 0) << "out " << dtype_name(out_dtype) << ", positions "
                               << dtype_name(position_dtype);
    }
  }
}
