// CUDA-graph capture: CudaGraph with its private pool replays a sequence of ops with the
// values the same ops give eagerly, allocating and copying nothing at replay; allocations
// during a capture without a pool are a clear Error and leave the stream usable; the free
// rules of captured memory; Tensor::arange without H2D copies; launch checks that do not
// synchronize a capturing stream; pinned uploads and downloads that count and never wait.
#include <gtest/gtest.h>

#include <cstdlib>

#include "core/expect_error.h"
#include "cuda/cuda_test_utils.h"
#include "microllm/core/random.h"
#include "microllm/cuda/allocator.h"
#include "microllm/cuda/check.h"
#include "microllm/cuda/graph.h"
#include "microllm/cuda/pinned.h"
#include "microllm/ops/activation.h"
#include "microllm/ops/elementwise.h"
#include "microllm/ops/gemm_mode.h"
#include "microllm/ops/matmul.h"
#include "microllm/ops/rms_norm.h"
#include "ops/op_test_util.h"

using namespace microllm;
using microllm::testing::throws_error;
using microllm::testing::optest::same_bits;

namespace {

const Device kGpu = Device::cuda(0);

// A small block of a decoder layer: out = x + down(silu(up(rms_norm(x)))) + bias, written
// into the preallocated `out`. Temporaries are allocated by the ops (from the pool when
// captured).
struct Block {
  Tensor norm_w, up_w, down_w, down_b;
  void run(const Tensor& x, Tensor out) const {
    const Tensor h = ops::rms_norm(x, norm_w, 1e-6);               // (N, C)
    const Tensor u = ops::silu(ops::linear(h, up_w));              // (N, F)
    const Tensor y = ops::add(x, ops::linear(u, down_w, down_b));  // (N, C)
    out.copy_from(y);
  }
};

Block make_block(DType dtype, int64_t C, int64_t F, Generator& gen) {
  Block b;
  b.norm_w = randn({C}, gen, DType::F32, Device::cpu(), 1.0, 0.1).to(dtype).to(kGpu);     // (C)
  b.up_w = randn({F, C}, gen, DType::F32, Device::cpu(), 0.0, 0.1).to(dtype).to(kGpu);    // (F, C)
  b.down_w = randn({C, F}, gen, DType::F32, Device::cpu(), 0.0, 0.1).to(dtype).to(kGpu);  // (C, F)
  b.down_b = randn({C}, gen).to(dtype).to(kGpu);                                          // (C)
  return b;
}

}  // namespace

TEST(CudaGraphCapture, ReplaysGiveTheEagerValuesAndAllocateNothing) {
  MICROLLM_REQUIRE_CUDA();
  const cuda::Stream stream = cuda::Stream::create(kGpu);
  cuda::StreamGuard on_stream(stream);
  for (DType dtype : microllm::testing::kCudaTestDtypes) {
    Generator gen(31);
    const int64_t N = 13, C = 96, F = 160;  // odd token count
    const Block block = make_block(dtype, C, F, gen);
    Tensor x = Tensor::empty({N, C}, dtype, kGpu);    // (N, C) input buffer
    Tensor out = Tensor::empty({N, C}, dtype, kGpu);  // (N, C) output buffer
    x.copy_from(randn({N, C}, gen).to(dtype));
    cuda::CudaGraph graph(kGpu);
    graph.capture(stream, [&] { block.run(x, out); });
    ASSERT_TRUE(graph.captured());
    EXPECT_GT(graph.num_nodes(), 4);
    const cuda::PoolStats pool_after_capture = graph.pool().stats();
    EXPECT_GT(pool_after_capture.allocations, 0);  // the temporaries came from the pool
    for (int replay = 0; replay < 5; ++replay) {
      const Tensor input = randn({N, C}, gen).to(dtype);  // (N, C) new values each step
      x.copy_from(input);
      cuda::reset_transfer_stats();
      const int64_t allocations = cuda::allocator_stats(kGpu).allocations;
      graph.replay(stream);
      EXPECT_EQ(cuda::allocator_stats(kGpu).allocations, allocations);
      const cuda::TransferStats moved = cuda::transfer_stats();
      EXPECT_EQ(moved.h2d_calls + moved.d2h_calls + moved.d2d_calls, 0);
      EXPECT_EQ(moved.host_synchronizations, 0);
      const Tensor replayed = out.clone();                      // (N, C)
      const Tensor eager = Tensor::empty({N, C}, dtype, kGpu);  // (N, C)
      block.run(x, eager);
      EXPECT_TRUE(same_bits(replayed, eager)) << dtype << " replay " << replay;
    }
    // Neither the replays nor the eager runs beside them touched the graph's pool.
    const cuda::PoolStats pool_now = graph.pool().stats();
    EXPECT_EQ(pool_now.allocations, pool_after_capture.allocations);
    EXPECT_EQ(pool_now.reserved_bytes, pool_after_capture.reserved_bytes);
  }
}

TEST(CudaGraphCapture, BatchInvariantGemmsReplayBitwise) {
  MICROLLM_REQUIRE_CUDA();
  const cuda::Stream stream = cuda::Stream::create(kGpu);
  cuda::StreamGuard on_stream(stream);
  ops::GemmModeGuard mode(ops::GemmMode::batch_invariant);
  Generator gen(32);
  const Tensor w = randn({1152, 896}, gen, DType::F32, Device::cpu(), 0.0, 0.05)
                       .to(DType::BF16)
                       .to(kGpu);                                  // (N, K)
  const Tensor b = randn({1152}, gen).to(DType::BF16).to(kGpu);    // (N)
  const Tensor x = randn({8, 896}, gen).to(DType::BF16).to(kGpu);  // (M, K)
  Tensor out = Tensor::empty({8, 1152}, DType::BF16, kGpu);        // (M, N)
  cuda::CudaGraph graph(kGpu);
  graph.capture(stream, [&] { out.copy_from(ops::linear(x, w, b)); });
  graph.replay(stream);
  EXPECT_TRUE(same_bits(out, ops::linear(x, w, b)));
  // A row replayed in the 8-row graph equals the same row computed alone.
  EXPECT_TRUE(same_bits(out.narrow(0, 5, 1), ops::linear(x.narrow(0, 5, 1), w, b)));
}

TEST(CudaGraphCapture, AllocationWithoutAPoolIsAClearErrorAndTheStreamStaysUsable) {
  MICROLLM_REQUIRE_CUDA();
  const cuda::Stream stream = cuda::Stream::create(kGpu);
  const Tensor before = Tensor::full({64}, 1.0, DType::F32, kGpu);  // made before capture
  cuda::synchronize(cuda::current_stream(kGpu));
  {
    cuda::StreamGuard on_stream(stream);
    CUDA_CHECK(cudaStreamBeginCapture(stream.handle(), cudaStreamCaptureModeThreadLocal));
    EXPECT_TRUE(throws_error([] { Tensor::empty({1000}, DType::F32, kGpu); }, "cuda allocator",
                             {"allocation of 4000 bytes on cuda:0 during CUDA-graph capture",
                              "allocate before capture or use a private pool"}));
    cudaGraph_t raw = nullptr;
    EXPECT_EQ(cudaStreamEndCapture(stream.handle(), &raw), cudaSuccess);  // not invalidated
    if (raw) cudaGraphDestroy(raw);
    EXPECT_FALSE(cuda::is_capturing(stream));
    // The stream takes ordinary work again.
    const Tensor t = Tensor::full({100}, 3.0, DType::F32, kGpu);
    for (float v : t.to_vector_f32()) ASSERT_EQ(v, 3.0f);
  }
  // Through CudaGraph: a host synchronization inside the captured function is refused
  // before it reaches the driver, the capture is ended, and the graph can capture again.
  cuda::CudaGraph graph(kGpu);
  Tensor out = Tensor::zeros({64}, DType::F32, kGpu);  // (64), zeroed on the main stream
  cuda::synchronize(cuda::current_stream(kGpu));
  EXPECT_TRUE(throws_error(
      [&] {
        graph.capture(stream, [&] {
          out.copy_from(ops::add(before, before));
          cuda::synchronize(stream);
        });
      },
      "cuda", {"while it captures a CUDA graph"}));
  EXPECT_FALSE(graph.captured());
  EXPECT_FALSE(cuda::is_capturing(stream));
  graph.capture(stream, [&] { out.copy_from(ops::add(before, before)); });
  graph.replay(stream);
  cuda::synchronize(stream);  // read on the main stream below
  for (float v : out.to_vector_f32()) ASSERT_EQ(v, 2.0f);
}

TEST(CudaGraphCapture, CapturedMemoryIsNeverHandedToTheGeneralCache) {
  MICROLLM_REQUIRE_CUDA();
  const cuda::Stream stream = cuda::Stream::create(kGpu);
  cuda::StreamGuard on_stream(stream);
  const int64_t base_pools = cuda::allocator_stats(kGpu).private_pools;
  const int64_t base_pool_reserved = cuda::allocator_stats(kGpu).pool_reserved_bytes;
  Tensor early = Tensor::full({1 << 18}, 1.0, DType::F32, kGpu);  // 1 MiB, general cache
  void* early_ptr = early.raw_data();
  void* first_ptr = nullptr;
  void* second_ptr = nullptr;
  Tensor sink = Tensor::zeros({1 << 18}, DType::F32, kGpu);  // (2^18)
  {
    cuda::CudaGraph graph(kGpu);
    EXPECT_EQ(cuda::allocator_stats(kGpu).private_pools, base_pools + 1);
    graph.capture(stream, [&] {
      {
        Tensor first = ops::add(early, early);  // from the pool
        first_ptr = first.raw_data();
        sink.copy_from(first);
      }
      // Freed inside the capture: reused inside the same pool only.
      Tensor second = ops::scale(sink, 2.0);
      second_ptr = second.raw_data();
      sink.copy_from(second);
      early = Tensor();  // a general-cache block freed during capture: the pool adopts it
    });
    EXPECT_EQ(second_ptr, first_ptr);
    const cuda::PoolStats pool = graph.pool().stats();
    EXPECT_EQ(pool.adopted_blocks, 1);
    EXPECT_GE(pool.cache_hits, 1);
    // After capture, ordinary allocations of the same size on the same stream get other
    // memory: the graph's replays still write the blocks it used.
    for (int i = 0; i < 3; ++i) {
      const Tensor fresh = Tensor::empty({1 << 18}, DType::F32, kGpu);
      EXPECT_NE(fresh.raw_data(), first_ptr);
      EXPECT_NE(fresh.raw_data(), early_ptr);
    }
    graph.replay(stream);
    for (float v : sink.to_vector_f32()) ASSERT_EQ(v, 4.0f);
    EXPECT_GT(cuda::allocator_stats(kGpu).pool_reserved_bytes, base_pool_reserved);
  }
  // The graph and its pool are gone, and so is the pool's memory.
  const cuda::AllocatorStats after = cuda::allocator_stats(kGpu);
  EXPECT_EQ(after.private_pools, base_pools);
  EXPECT_EQ(after.pool_reserved_bytes, base_pool_reserved);
}

TEST(CudaGraphCapture, ABlockOfAnotherStreamFreedDuringCaptureIsAdopted) {
  MICROLLM_REQUIRE_CUDA();
  const cuda::Stream stream = cuda::Stream::create(kGpu);
  Tensor on_main = Tensor::full({1 << 16}, 3.0, DType::F32, kGpu);  // main stream's cache
  Tensor out = Tensor::zeros({1 << 16}, DType::F32, kGpu);          // (2^16)
  void* main_ptr = on_main.raw_data();
  cuda::synchronize(cuda::current_stream(kGpu));
  cuda::CudaGraph graph(kGpu);
  graph.capture(stream, [&] {
    out.copy_from(ops::add(on_main, on_main));
    on_main = Tensor();  // read by the graph, freed while it captures on another stream
  });
  EXPECT_EQ(graph.pool().stats().adopted_blocks, 1);
  for (int i = 0; i < 3; ++i) {
    const Tensor fresh = Tensor::empty({1 << 16}, DType::F32, kGpu);  // on the main stream
    EXPECT_NE(fresh.raw_data(), main_ptr);
  }
  graph.replay(stream);
  cuda::synchronize(stream);  // read on the main stream below
  for (float v : out.to_vector_f32()) ASSERT_EQ(v, 6.0f);
}

TEST(CudaGraphCapture, ArangeMakesNoHostToDeviceCopy) {
  MICROLLM_REQUIRE_CUDA();
  cuda::synchronize(cuda::current_stream(kGpu));
  for (DType dtype : {DType::I64, DType::I32, DType::F32, DType::BF16}) {
    cuda::reset_transfer_stats();
    const Tensor t = Tensor::arange(300, dtype, kGpu);  // (300)
    EXPECT_EQ(cuda::transfer_stats().h2d_calls, 0) << dtype;
    EXPECT_EQ(cuda::transfer_stats().host_synchronizations, 0) << dtype;
    EXPECT_EQ(t.to_vector_f64(), Tensor::arange(300, dtype).to_vector_f64()) << dtype;
  }
  // Being a kernel, it can be captured too.
  const cuda::Stream stream = cuda::Stream::create(kGpu);
  Tensor out = Tensor::zeros({37}, DType::I32, kGpu);  // (37), zeroed on the main stream
  cuda::synchronize(cuda::current_stream(kGpu));
  cuda::CudaGraph graph(kGpu);
  graph.capture(stream, [&] { out.copy_from(Tensor::arange(37, DType::I32, kGpu)); });
  graph.replay(stream);
  cuda::synchronize(stream);  // read on the main stream below
  EXPECT_EQ(out.to_vector_i64(), Tensor::arange(37).to_vector_i64());
}

TEST(CudaGraphCapture, SynchronizingLaunchChecksSkipACapturingStream) {
  MICROLLM_REQUIRE_CUDA();
  const bool previous = cuda::launch_sync_check();
  setenv("MICROLLM_CUDA_SYNC_CHECK", "1", 1);
  cuda::set_launch_sync_check(true);  // as the variable asks, whenever it was first read
  const cuda::Stream stream = cuda::Stream::create(kGpu);
  cuda::StreamGuard on_stream(stream);
  const Tensor a = Tensor::full({1000}, 1.5, DType::F32, kGpu);  // (1000)
  Tensor out = Tensor::zeros({1000}, DType::F32, kGpu);          // (1000)
  cuda::reset_transfer_stats();
  out.copy_from(ops::mul(a, a));  // eager: every launch check synchronizes
  const int64_t eager_checks = cuda::transfer_stats().launch_check_synchronizations;
  EXPECT_GT(eager_checks, 0);
  EXPECT_EQ(cuda::transfer_stats().host_synchronizations, 0);  // kept apart
  cuda::CudaGraph graph(kGpu);
  cuda::reset_transfer_stats();
  EXPECT_NO_THROW(graph.capture(stream, [&] { out.copy_from(ops::mul(ops::add(a, a), a)); }));
  EXPECT_EQ(cuda::transfer_stats().launch_check_synchronizations, 0);  // none while capturing
  graph.replay(stream);
  for (float v : out.to_vector_f32()) ASSERT_EQ(v, 4.5f);
  cuda::set_launch_sync_check(previous);
  unsetenv("MICROLLM_CUDA_SYNC_CHECK");
}

TEST(CudaPinned, AsyncUploadAndDownloadCountAndDoNotSynchronize) {
  MICROLLM_REQUIRE_CUDA();
  const cuda::Stream stream = cuda::current_stream(kGpu);
  cuda::PinnedBuffer up(1024), down(1024);
  const Tensor host_in = up.view({5, 7}, DType::I32, 256);  // (5, 7) at byte 256
  for (int64_t i = 0; i < 35; ++i) host_in.data<int32_t>()[i] = static_cast<int32_t>(3 * i - 40);
  const Tensor device = Tensor::empty({5, 7}, DType::I32, kGpu);  // (5, 7)
  cuda::Event done;
  cuda::reset_transfer_stats();
  up.upload(device, stream, 256);
  const Tensor doubled = ops::add(device.to(DType::F32), device.to(DType::F32)).to(DType::I32);
  down.download(doubled, stream, 0);
  done.record(stream);
  const cuda::TransferStats queued = cuda::transfer_stats();
  EXPECT_EQ(queued.h2d_calls, 1);
  EXPECT_EQ(queued.h2d_bytes, 35 * 4);
  EXPECT_EQ(queued.d2h_calls, 1);
  EXPECT_EQ(queued.d2h_bytes, 35 * 4);
  EXPECT_EQ(queued.host_synchronizations, 0);  // nothing waited yet
  done.synchronize();
  EXPECT_EQ(cuda::transfer_stats().host_synchronizations, 1);  // the one wait
  const Tensor host_out = down.view({5, 7}, DType::I32);
  for (int64_t i = 0; i < 35; ++i) EXPECT_EQ(host_out.data<int32_t>()[i], 2 * (3 * i - 40));
  EXPECT_TRUE(throws_error([&] { up.upload(device, stream, 1000); }, "pinned buffer",
                           {"does not fit the 1024-byte buffer"}));
  EXPECT_TRUE(throws_error([&] { up.upload(host_in, stream); }, "pinned buffer",
                           {"needs a dense CUDA tensor"}));
}
