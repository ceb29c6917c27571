// CUDA backward of attention and embedding without atomics: two runs of the same backward
// (random output gradients, many repeated ids) give the same bits.
#include <gtest/gtest.h>

#include <vector>

#include "cuda/cuda_test_utils.h"
#include "microllm/core/random.h"
#include "microllm/ops/ops.h"

using namespace microllm;

namespace {

Tensor leaf(const Shape& shape, uint64_t seed, double mean = 0.0, double std = 1.0) {
  return microllm::testing::cuda_test_leaf(shape, seed, mean, std);
}

}  // namespace

TEST(CudaDeterminism, AttentionAndEmbeddingGradientsRepeatBitwise) {
  MICROLLM_REQUIRE_CUDA();
  // No atomics: two runs of the same backward give the same bits.
  const Device gpu = Device::cuda(0);
  auto grads = [&]() {
    Tensor q = leaf({2, 14, 65, 64}, 131).to(gpu).detach().set_requires_grad(true);
    Tensor k = leaf({2, 2, 65, 64}, 132).to(gpu).detach().set_requires_grad(true);
    Tensor v = leaf({2, 2, 65, 64}, 133).to(gpu).detach().set_requires_grad(true);
    Tensor w = leaf({1000, 96}, 134).to(gpu).detach().set_requires_grad(true);
    Generator gen(135);
    const Tensor ids = randint({512}, 0, 10, gen, DType::I64, gpu);  // many repeats
    // Random output gradients, so the order of the sums shows in the bits.
    ops::attention(q, k, v).backward(randn({2, 14, 65, 64}, gen, DType::F32, gpu));
    ops::embedding(w, ids).backward(randn({512, 96}, gen, DType::F32, gpu));
    return std::vector<std::vector<double>>{q.grad().to_vector_f64(), k.grad().to_vector_f64(),
                                            v.grad().to_vector_f64(), w.grad().to_vector_f64()};
  };
  const auto first = grads(), second = grads();
  for (size_t i = 0; i < first.size(); ++i) EXPECT_EQ(first[i], second[i]) << "gradient " << i;
}
