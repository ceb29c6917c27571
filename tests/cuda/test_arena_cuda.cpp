// Arena on CUDA: one allocation from the caching allocator, then views that allocate
// nothing, 256-byte aligned and disjoint (each view filled on the device keeps its value).
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "cuda/cuda_test_utils.h"
#include "microllm/core/arena.h"
#include "microllm/cuda/allocator.h"

using namespace microllm;

TEST(CudaArena, OneAllocationThenAlignedDisjointViews) {
  MICROLLM_REQUIRE_CUDA();
  const Device gpu = Device::cuda(0);
  const int64_t before = cuda::allocator_stats(gpu).allocations;
  Arena arena(1 << 20, gpu);
  EXPECT_EQ(cuda::allocator_stats(gpu).allocations - before, 1);
  const std::vector<Shape> shapes = {{3, 5}, {1000}, {1}, {7, 9, 11}, {129}};
  std::vector<Tensor> views;
  for (size_t i = 0; i < shapes.size(); ++i) {
    views.push_back(arena.take(shapes[i], i % 2 ? DType::BF16 : DType::F32));
    EXPECT_EQ(reinterpret_cast<uintptr_t>(views.back().raw_data()) % 256, 0u) << "view " << i;
    EXPECT_TRUE(views.back().is_cuda());
  }
  EXPECT_EQ(cuda::allocator_stats(gpu).allocations - before, 1);  // takes allocate nothing
  for (size_t i = 0; i < views.size(); ++i) views[i].fill(static_cast<double>(i + 1));
  for (size_t i = 0; i < views.size(); ++i)
    for (double v : views[i].to_vector_f64()) ASSERT_EQ(v, static_cast<double>(i + 1)) << i;
  arena.reset();
  EXPECT_EQ(arena.take(shapes[0], DType::F32).raw_data(), views[0].raw_data());
}
