// CUDA apply_penalties against the CPU reference, bit for bit (both run penalty_math.h):
// a real vocabulary (151,936) at B = 1, 8 and 64, histories from 1 to 20,000 entries with
// −1 padding, ids outside the vocabulary, heavy repetition and every penalty on or off.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "cuda/cuda_test_utils.h"
#include "microllm/core/random.h"
#include "microllm/ops/penalties.h"

using namespace microllm;

namespace {

const Device kGpu = Device::cuda(0);

void expect_cuda_equals_cpu(int64_t batch, int64_t vocab, int64_t length, uint64_t seed) {
  SCOPED_TRACE(::testing::Message() << "B " << batch << " V " << vocab << " L " << length);
  Generator gen(seed);
  const Tensor logits = randn({batch, vocab}, gen, DType::F32, Device::cpu(), 0.0, 4.0);
  std::vector<int64_t> history(batch * length), prompt;
  std::vector<double> rep, freq, pres;
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t used = length - (b * 13) % (length + 1);  // the rest is −1 padding
    const int64_t range = b % 3 == 0 ? 50 : vocab + 10;     // repetition, or ids past V
    for (int64_t j = 0; j < length; ++j)
      history[b * length + j] = j < used ? static_cast<int64_t>(gen.next_u64() % range) : -1;
    prompt.push_back((b * 7) % (length + 1));
    rep.push_back(b % 4 == 3 ? 1.0 : 0.8 + 0.1 * (b % 5));
    freq.push_back(b % 4 == 2 ? 0.0 : 0.25 * (b % 3) - 0.2);
    pres.push_back(b % 4 == 1 ? 0.0 : 0.5);
  }
  auto run = [&](Device d) {
    Tensor l = logits.to(d).clone();
    const Tensor h = Tensor::from_vector(history, {batch, length}, DType::I32, d);
    const Tensor pl = Tensor::from_vector(prompt, {batch}, DType::I32, d);
    const ops::PenaltyTensors p{Tensor::from_vector(rep, {batch}, DType::F32, d),
                                Tensor::from_vector(freq, {batch}, DType::F32, d),
                                Tensor::from_vector(pres, {batch}, DType::F32, d)};
    const Tensor ws = Tensor::empty(
        {static_cast<int64_t>(ops::penalties_workspace_bytes(batch, length))}, DType::U8, d);
    ops::apply_penalties(l, h, pl, p, ws);
    return l.to_vector_f32();
  };
  EXPECT_EQ(run(kGpu), run(Device::cpu()));
}

}  // namespace

TEST(PenaltiesCuda, EqualsCpuBitForBit) {
  MICROLLM_REQUIRE_CUDA();
  for (int64_t batch : {1, 8, 64}) expect_cuda_equals_cpu(batch, 151936, 777, 10 + batch);
  for (int64_t length : {1, 2, 31, 1024, 4097, 20000})
    expect_cuda_equals_cpu(5, 5003, length, length);
}
