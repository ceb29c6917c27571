// CUDA runtime tests: caching allocator (reuse, stats, streams, empty_cache), transfers and
// their counters, strided converting copies on the device (word copies over merged dims,
// float conversions, 64-bit offsets).
#include <gtest/gtest.h>

#include <functional>
#include <vector>

#include "cuda/cuda_test_utils.h"
#include "microllm/core/random.h"
#include "microllm/cuda/allocator.h"
#include "microllm/cuda/pinned.h"
#include "microllm/ops/ops.h"

using namespace microllm;
using microllm::testing::relative_l2;

namespace {
const Device kGpu = Device::cuda(0);
}

TEST(CudaAllocator, RoundsSizesIntoClasses) {
  // Pure arithmetic: runs without a GPU too.
  EXPECT_EQ(cuda::round_size(1), 512u);
  EXPECT_EQ(cuda::round_size(512), 512u);
  EXPECT_EQ(cuda::round_size(513), 1024u);
  EXPECT_EQ(cuda::round_size((1 << 20) + 1), (1u << 20) + 65536u);
  EXPECT_EQ(cuda::round_size(100u << 20), 100u << 20);
  EXPECT_EQ(cuda::round_size((100u << 20) + 1), (102u << 20));
}

TEST(CudaAllocator, ReusesFreedBlocksOnTheSameStream) {
  MICROLLM_REQUIRE_CUDA();
  cuda::empty_cache(kGpu);
  const cuda::AllocatorStats before = cuda::allocator_stats(kGpu);
  void* first = nullptr;
  {
    Tensor t = Tensor::empty({1000, 1000}, DType::F32, kGpu);  // 4 MB
    first = t.raw_data();
  }
  Tensor again = Tensor::empty({1000, 1000}, DType::F32, kGpu);
  const cuda::AllocatorStats after = cuda::allocator_stats(kGpu);
  EXPECT_EQ(again.raw_data(), first);
  EXPECT_EQ(after.backend_mallocs - before.backend_mallocs, 1);
  EXPECT_EQ(after.cache_hits - before.cache_hits, 1);
  EXPECT_EQ(after.allocated_bytes - before.allocated_bytes,
            static_cast<int64_t>(cuda::round_size(4000000)));
}

TEST(CudaAllocator, TracksPeakAndReservedAndEmptiesCache) {
  MICROLLM_REQUIRE_CUDA();
  cuda::empty_cache(kGpu);
  cuda::reset_peak_stats(kGpu);
  const cuda::AllocatorStats base = cuda::allocator_stats(kGpu);
  {
    Tensor a = Tensor::empty({64 << 20}, DType::U8, kGpu);
    Tensor b = Tensor::empty({32 << 20}, DType::U8, kGpu);
    const cuda::AllocatorStats live = cuda::allocator_stats(kGpu);
    EXPECT_EQ(live.allocated_bytes - base.allocated_bytes, (96 << 20));
    EXPECT_GE(live.reserved_bytes, live.allocated_bytes);
  }
  const cuda::AllocatorStats freed = cuda::allocator_stats(kGpu);
  EXPECT_EQ(freed.allocated_bytes, base.allocated_bytes);
  EXPECT_EQ(freed.peak_allocated_bytes - base.allocated_bytes, (96 << 20));
  EXPECT_GE(freed.reserved_bytes - base.reserved_bytes, (96 << 20));  // cached, not returned
  cuda::empty_cache(kGpu);
  const cuda::AllocatorStats emptied = cuda::allocator_stats(kGpu);
  EXPECT_EQ(emptied.reserved_bytes, base.reserved_bytes);
  EXPECT_GE(emptied.backend_frees - freed.backend_frees, 2);
}

TEST(CudaAllocator, BlocksAreNotSharedAcrossStreamsAndRecordStreamDelaysReuse) {
  MICROLLM_REQUIRE_CUDA();
  cuda::empty_cache(kGpu);
  const cuda::Stream side = cuda::Stream::create(kGpu);
  void* on_main = nullptr;
  {
    Tensor t = Tensor::empty({1 << 20}, DType::F32, kGpu);
    on_main = t.raw_data();
  }
  {
    cuda::StreamGuard guard(side);
    Tensor t = Tensor::empty({1 << 20}, DType::F32, kGpu);
    EXPECT_NE(t.raw_data(), on_main);  // the main stream's cached block stays there
  }
  // A block used by the side stream is reused on main only after that work completes.
  void* recorded = nullptr;
  {
    Tensor t = Tensor::ones({1 << 22}, DType::F32, kGpu);
    recorded = t.raw_data();
    cuda::record_stream(recorded, side.handle());
  }
  cuda::synchronize(side);
  Tensor u = Tensor::empty({1 << 22}, DType::F32, kGpu);
  EXPECT_EQ(u.raw_data(), recorded);
}

TEST(CudaAllocator, OutOfMemoryIsAClearError) {
  MICROLLM_REQUIRE_CUDA();
  try {
    Tensor t = Tensor::empty({int64_t(1) << 50}, DType::U8, kGpu);  // 1 PiB
    FAIL() << "allocation of 1 PiB succeeded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("out of memory"), std::string::npos) << e.what();
  }
  // The failed cudaMalloc must not linger as the "last error" and fail the next launch.
  const Tensor after = Tensor::full({1000, 3}, 2.0, DType::F32, kGpu).transpose(0, 1).contiguous();
  for (float v : after.to_vector_f32()) ASSERT_EQ(v, 2.0f);
}

TEST(CudaTransfers, RoundTripCountsCallsAndBytes) {
  MICROLLM_REQUIRE_CUDA();
  Generator gen(3);
  const Tensor host = randn({123, 45}, gen);
  cuda::reset_transfer_stats();
  const Tensor device = host.to(kGpu);
  const Tensor back = device.to(Device::cpu());
  const cuda::TransferStats s = cuda::transfer_stats();
  EXPECT_EQ(s.h2d_calls, 1);
  EXPECT_EQ(s.h2d_bytes, 123 * 45 * 4);
  EXPECT_EQ(s.d2h_calls, 1);
  EXPECT_EQ(s.d2h_bytes, 123 * 45 * 4);
  EXPECT_EQ(s.host_synchronizations, 1);
  EXPECT_EQ(back.to_vector_f32(), host.to_vector_f32());
}

TEST(CudaTransfers, PinnedBufferGrows) {
  MICROLLM_REQUIRE_CUDA();
  cuda::PinnedBuffer buffer(100);
  EXPECT_GE(buffer.size(), 100u);
  buffer.reserve(1 << 20);
  EXPECT_GE(buffer.size(), 1u << 20);
  static_cast<char*>(buffer.data())[(1 << 20) - 1] = 7;  // writable
}

TEST(CudaCopy, StridedAndConvertingCopiesMatchTheCpu) {
  MICROLLM_REQUIRE_CUDA();
  Generator gen(5);
  const Tensor host = randn({7, 33, 65}, gen);
  const Tensor device = host.to(kGpu);
  // Permuted / narrowed views made dense on the device equal the same on the host.
  const Tensor h = host.permute({2, 0, 1}).narrow(0, 3, 50).contiguous();
  const Tensor d = device.permute({2, 0, 1}).narrow(0, 3, 50).contiguous();
  EXPECT_EQ(d.to(Device::cpu()).to_vector_f32(), h.to_vector_f32());
  // Conversions: the device rounds like the host for every floating dtype.
  for (DType dtype : {DType::BF16, DType::F16, DType::F8E4M3, DType::F8E5M2, DType::F64}) {
    const Tensor hc = host.transpose(0, 2).to(dtype);
    const Tensor dc = device.transpose(0, 2).to(dtype);
    EXPECT_EQ(dc.to(Device::cpu()).to_vector_f64(), hc.to_vector_f64()) << dtype;
  }
  // Large integer ids survive I64 ↔ I32 on the device.
  const Tensor ids = Tensor::from_vector(std::vector<int64_t>{0, 151935, 2147483647, -5}, {4});
  EXPECT_EQ(ids.to(kGpu).to(DType::I32).to(DType::I64).to_vector_i64(), ids.to_vector_i64());
}

// Bytes of a dense host tensor, for bitwise comparisons of any dtype.
std::vector<unsigned char> host_bytes(const Tensor& t) {
  const Tensor dense = t.to(Device::cpu()).contiguous();
  const auto* p = static_cast<const unsigned char*>(dense.raw_data());
  return {p, p + dense.nbytes()};
}

TEST(CudaCopy, WordCopiesOfStridedLayoutsMatchTheCpu) {
  MICROLLM_REQUIRE_CUDA();
  // The attention transposes and their neighbours at every element size: 16-byte words where
  // rows line up, narrower words where they do not (odd rows, odd offsets, broadcasts).
  for (DType dtype : {DType::U8, DType::BF16, DType::F32, DType::I64}) {
    for (int64_t D : {64, 128, 63, 2}) {
      SCOPED_TRACE(::testing::Message() << dtype << " D " << D);
      std::vector<double> values(static_cast<size_t>(3 * 37 * 5 * (D + 3)));
      for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<double>(i * 7919 % 251);
      const Tensor host = Tensor::from_vector(values, {3, 37, 5, D + 3}, dtype);
      const Tensor device = host.to(kGpu);
      const auto both = [&](const std::function<Tensor(const Tensor&)>& view) {
        EXPECT_EQ(host_bytes(view(device).contiguous()), host_bytes(view(host).contiguous()));
      };
      both([D](const Tensor& t) { return t.narrow(3, 0, D).transpose(1, 2); });
      both([D](const Tensor& t) { return t.narrow(3, 1, D).transpose(1, 2); });
      both([D](const Tensor& t) { return t.narrow(3, 3, D).permute({3, 1, 0, 2}); });
      both([](const Tensor& t) { return t.narrow(1, 4, 11); });
      both([D](const Tensor& t) {
        return t.narrow(0, 1, 1).narrow(2, 2, 1).narrow(3, 0, D).expand({4, 37, 6, D});
      });
      // Into a strided destination: a transposed dense buffer.
      Tensor dst_host = Tensor::zeros({3, 5, 37, D + 3}, dtype);
      Tensor dst_device = dst_host.to(kGpu);
      dst_host.transpose(1, 2).copy_from(host);
      dst_device.transpose(1, 2).copy_from(device);
      EXPECT_EQ(host_bytes(dst_device), host_bytes(dst_host));
    }
  }
}

TEST(CudaCopy, FloatConversionsOfStridedLayoutsMatchTheCpu) {
  MICROLLM_REQUIRE_CUDA();
  Generator gen(10);
  const Tensor base = randn({4, 33, 6, 64}, gen) * 1000.0;  // F32, beyond F16's precision
  for (DType from : {DType::F32, DType::BF16, DType::F16})
    for (DType to : {DType::F32, DType::BF16, DType::F16}) {
      if (from == to) continue;
      SCOPED_TRACE(::testing::Message() << from << " -> " << to);
      const Tensor host = base.to(from);
      const Tensor device = host.to(kGpu);
      EXPECT_EQ(host_bytes(device.to(to)), host_bytes(host.to(to)));
      EXPECT_EQ(host_bytes(device.transpose(1, 2).to(to)), host_bytes(host.transpose(1, 2).to(to)));
      EXPECT_EQ(host_bytes(device.narrow(3, 1, 61).to(to)),
                host_bytes(host.narrow(3, 1, 61).to(to)));
    }
}

TEST(CudaCopy, OffsetsPastTwoToThe31TakeWideIndices) {
  MICROLLM_REQUIRE_CUDA();
  // (3, 2^30 + 64) bytes: row 2 starts past 2^31, so the copy of the first 64 bytes of each
  // row needs 64-bit offsets.
  const int64_t row = (int64_t{1} << 30) + 64;
  const Tensor big = Tensor::zeros({3, row}, DType::U8, kGpu);
  std::vector<double> values(3 * 64);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<double>(i % 200 + 1);
  const Tensor small = Tensor::from_vector(values, {3, 64}, DType::U8);
  big.narrow(1, 0, 64).copy_from(small.to(kGpu));
  EXPECT_EQ(host_bytes(big.narrow(1, 0, 64).contiguous()), host_bytes(small));
  EXPECT_EQ(host_bytes(big.narrow(0, 2, 1).narrow(1, 64, 64).contiguous()),
            std::vector<unsigned char>(64, 0));
}

TEST(CudaCopy, FillAndZerosOnDevice) {
  MICROLLM_REQUIRE_CUDA();
  const Tensor z = Tensor::zeros({1000, 17}, DType::BF16, kGpu);
  for (double v : z.to_vector_f64()) ASSERT_EQ(v, 0.0);
  Tensor f = Tensor::full({3, 5}, 2.5, DType::F32, kGpu);
  f.transpose(0, 1).narrow(0, 1, 2).fill(-1.0);
  const std::vector<float> values = f.to_vector_f32();
  for (int64_t r = 0; r < 3; ++r)
    for (int64_t c = 0; c < 5; ++c) EXPECT_EQ(values[r * 5 + c], (c == 1 || c == 2) ? -1.0f : 2.5f);
}

TEST(CudaCopy, LargeTensorRoundTrip) {
  MICROLLM_REQUIRE_CUDA();
  const int64_t n = int64_t(1) << 24;  // 16M elements
  std::vector<float> values(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) values[i] = static_cast<float>(i % 1000003) * 0.5f;
  const Tensor host = Tensor::from_vector(values, {n});
  const Tensor bf = host.to(kGpu).to(DType::BF16).to(DType::F32).to(Device::cpu());
  EXPECT_EQ(bf.to_vector_f32(), host.to(DType::BF16).to(DType::F32).to_vector_f32());
}
