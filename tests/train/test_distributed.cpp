// Data-parallel building blocks on the CPU: the post-accumulate-grad hook, bucket assignment,
// ZeRO-1 shard segments, the sampler's rank mapping, the in-process collectives, the
// torchrun environment and the TCP rendezvous (threads and processes on localhost).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstring>
#include <map>
#include <set>
#include <thread>

#include "core/expect_error.h"
#include "microllm/autograd/node.h"
#include "microllm/core/random.h"
#include "microllm/ops/elementwise.h"
#include "microllm/ops/reduce.h"
#include "microllm/train/distributed/buckets.h"
#include "microllm/train/distributed/environment.h"
#include "microllm/train/distributed/in_process_communicator.h"
#include "microllm/train/distributed/tcp_rendezvous.h"
#include "microllm/train/trainer.h"

using namespace microllm;
using microllm::testing::throws_error;

namespace {

// Runs fn(rank, comm) on one thread per rank of a new in-process group; a rank that throws
// aborts the group (so no other rank hangs) and its message is returned in errors[rank].
std::vector<std::string> run_ranks(
    int world, const std::function<void(int, train::InProcessCommunicator&)>& fn,
    double timeout_seconds = 60) {
  auto comms = train::InProcessCommunicator::create_group(world, Device::cpu(), timeout_seconds);
  std::vector<std::string> errors(static_cast<size_t>(world));
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      try {
        fn(r, *comms[static_cast<size_t>(r)]);
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(r)] = e.what();
        comms[static_cast<size_t>(r)]->group().abort("rank " + std::to_string(r) + " failed");
      }
    });
  }
  for (std::thread& t : threads) t.join();
  return errors;
}

std::vector<uint8_t> bytes_of(const Tensor& t) {
  const auto* p = static_cast<const uint8_t*>(t.raw_data());
  return std::vector<uint8_t>(p, p + t.nbytes());
}

}  // namespace

// ---- autograd hook ---------------------------------------------------------------------------

TEST(PostAccumulateGradHook, RunsOnceWithTheFinalGradient) {
  Tensor w = Tensor::from_vector(std::vector<double>{1.0, 2.0, 3.0}, {3}).set_requires_grad(true);
  Tensor x = Tensor::from_vector(std::vector<double>{0.5, -1.0, 4.0}, {3});
  std::vector<std::vector<double>> seen;
  const int64_t id = autograd::register_post_accumulate_grad_hook(
      w, [&](const Tensor& leaf) { seen.push_back(leaf.grad().to_vector_f64()); });
  // w is used twice: the hook sees the sum of both contributions, once.
  ops::sum_all(ops::add(ops::mul(w, x), ops::mul(w, w))).backward();
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0], (std::vector<double>{0.5 + 2.0, -1.0 + 4.0, 4.0 + 6.0}));
  // A second backward accumulates, and the hook sees the accumulated value.
  ops::sum_all(ops::mul(w, x)).backward();
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[1], (std::vector<double>{3.0, 2.0, 14.0}));
  autograd::remove_post_accumulate_grad_hook(w, id);
  ops::sum_all(ops::mul(w, x)).backward();
  EXPECT_EQ(seen.size(), 2u);
  EXPECT_TRUE(
      throws_error([&] { autograd::register_post_accumulate_grad_hook(x, [](const Tensor&) {}); },
                   "autograd", {"leaves that require a gradient"}));
}

// ---- buckets and shards ---------------------------------------------------------------------

TEST(Buckets, ReverseRegistrationOrderUnderTheCap) {
  // numel 10, 20, 30, 40 (F32: 40, 80, 120, 160 bytes), cap 200 bytes.
  const std::vector<train::ParamLayout> params = {
      {10, DType::F32}, {20, DType::F32}, {30, DType::F32}, {40, DType::F32}};
  const std::vector<train::GradBucket> b = train::assign_buckets(params, 200, 4);
  ASSERT_EQ(b.size(), 3u);
  ASSERT_EQ(b[0].entries.size(), 1u);  // 40 (160 B); 30 more would exceed 200 B
  EXPECT_EQ(b[0].entries[0].param, 3u);
  ASSERT_EQ(b[1].entries.size(), 2u);  // 30 then 20: exactly 200 B
  EXPECT_EQ(b[1].entries[0].param, 2u);
  EXPECT_EQ(b[1].entries[1].param, 1u);
  EXPECT_EQ(b[1].entries[1].offset, 30);
  EXPECT_EQ(b[1].numel, 50);
  EXPECT_EQ(b[1].padded_numel, 52);  // a multiple of the world size 4
  EXPECT_EQ(b[1].shard_numel(4), 13);
  EXPECT_EQ(b[2].entries[0].param, 0u);

  // A parameter larger than the cap gets a bucket of its own; a dtype change closes a bucket.
  const std::vector<train::ParamLayout> mixed = {
      {4, DType::BF16}, {4, DType::BF16}, {1000, DType::F32}, {2, DType::F32}, {3, DType::F32}};
  const std::vector<train::GradBucket> m = train::assign_buckets(mixed, 64, 1);
  ASSERT_EQ(m.size(), 3u);
  EXPECT_EQ(m[0].entries.size(), 2u);  // params 4 and 3 (F32, 20 B)
  EXPECT_EQ(m[1].entries.size(), 1u);  // param 2 alone (4000 B)
  EXPECT_EQ(m[1].numel, 1000);
  EXPECT_EQ(m[2].dtype, DType::BF16);
  EXPECT_EQ(m[2].entries.size(), 2u);
  EXPECT_TRUE(throws_error([&] { train::assign_buckets(params, 0, 1); }, "buckets", {"positive"}));
}

TEST(Buckets, ShardSegmentsCoverEveryElementOnce) {
  Generator gen(3);
  std::vector<train::ParamLayout> params;
  for (int i = 0; i < 9; ++i)
    params.push_back({1 + static_cast<int64_t>(gen.next_u64() % 37), DType::F32});
  for (int world : {1, 2, 3, 4, 7}) {
    for (const train::GradBucket& bucket : train::assign_buckets(params, 4 * 50, world)) {
      std::map<size_t, std::vector<int>> covered;  // param → hits per element
      for (const train::BucketEntry& e : bucket.entries)
        covered[e.param].assign(static_cast<size_t>(e.numel), 0);
      for (int r = 0; r < world; ++r) {
        for (const train::ShardSegment& s : train::shard_segments(bucket, r, world)) {
          EXPECT_GE(s.shard_offset, 0);
          EXPECT_LE(s.shard_offset + s.numel, bucket.shard_numel(world));
          for (int64_t i = 0; i < s.numel; ++i)
            ++covered.at(s.param).at(static_cast<size_t>(s.param_offset + i));
        }
      }
      for (const auto& [param, hits] : covered)
        for (int h : hits) EXPECT_EQ(h, 1) << "world " << world << " param " << param;
    }
  }
}

// ---- the sampler's rank mapping --------------------------------------------------------------

TEST(DataParallelSampler, RanksTogetherDrawTheSingleRunWindows) {
  const int64_t B = 3, k = 2, seq = 5;
  Generator gen(1);
  std::vector<double> ids(500);
  for (double& v : ids) v = static_cast<double>(gen.next_u64() % 50);
  const Tensor tokens = Tensor::from_vector(ids, {500}, DType::I32);
  for (int world : {1, 2, 4}) {
    for (int64_t step = 0; step < 3; ++step) {
      for (int64_t micro = 0; micro < k; ++micro) {
        // One rank with batch W·B: micro-batch `micro` of step `step`.
        const int64_t single_first = train::first_window(step, micro, k, world * B, 0, 1);
        const Tensor single =
            train::sample_windows(tokens, seq, 7, single_first, world * B, Device::cpu());
        std::vector<int64_t> joined;
        std::set<int64_t> firsts;
        for (int r = 0; r < world; ++r) {
          const int64_t first = train::first_window(step, micro, k, B, r, world);
          firsts.insert(first);
          const std::vector<int64_t> part =
              train::sample_windows(tokens, seq, 7, first, B, Device::cpu()).to_vector_i64();
          joined.insert(joined.end(), part.begin(), part.end());
        }
        EXPECT_EQ(firsts.size(), static_cast<size_t>(world));
        EXPECT_EQ(joined, single.to_vector_i64())
            << "world " << world << " step " << step << " micro " << micro;
      }
    }
  }
  // The single-process numbering is unchanged: (steps·k + micro)·B.
  EXPECT_EQ(train::first_window(5, 1, 3, 4, 0, 1), (5 * 3 + 1) * 4);
}

// ---- in-process collectives ------------------------------------------------------------------

TEST(InProcessCommunicator, CollectivesSumInRankOrderAndAgreeBitwise) {
  const int W = 3;
  const int64_t n = 5;
  // Rank r's values: deterministic, different per rank, not exactly representable sums.
  auto values = [&](int r, int64_t count) {
    std::vector<double> v(static_cast<size_t>(count));
    for (int64_t i = 0; i < count; ++i)
      v[static_cast<size_t>(i)] = 0.1 * (r + 1) + 0.37 * static_cast<double>(i) / (r + 2);
    return v;
  };
  std::vector<std::vector<uint8_t>> reduced(W), avg_bf16(W);
  std::vector<std::vector<double>> scattered(W), gathered(W), broadcast(W);
  const auto errors = run_ranks(W, [&](int r, train::InProcessCommunicator& comm) {
    EXPECT_EQ(comm.rank(), r);
    EXPECT_EQ(comm.world_size(), W);
    Tensor t = Tensor::from_vector(values(r, n), {n});
    comm.all_reduce(t, train::ReduceOp::Sum);
    reduced[r] = bytes_of(t);
    Tensor b = Tensor::from_vector(values(r, n), {n}, DType::BF16);
    comm.all_reduce_async(b, train::ReduceOp::Avg)->wait();
    avg_bf16[r] = bytes_of(b);
    Tensor big = Tensor::from_vector(values(r, W * n), {W * n});
    Tensor part = Tensor::zeros({n});
    comm.reduce_scatter(big, part, train::ReduceOp::Sum);
    scattered[r] = part.to_vector_f64();
    Tensor all = Tensor::zeros({W, n});
    comm.all_gather(Tensor::full({n}, r + 0.5), all);
    gathered[r] = all.to_vector_f64();
    Tensor root = Tensor::full({2}, 10.0 * r);
    comm.broadcast(root, 2);
    broadcast[r] = root.to_vector_f64();
    comm.barrier();
  });
  for (const std::string& e : errors) ASSERT_EQ(e, "");
  // The expected sum: F32 additions in rank order 0, 1, 2.
  std::vector<float> expect(static_cast<size_t>(n), 0.0f);
  for (int r = 0; r < W; ++r)
    for (int64_t i = 0; i < n; ++i) {
      const float x = static_cast<float>(values(r, n)[static_cast<size_t>(i)]);
      expect[static_cast<size_t>(i)] = r == 0 ? x : expect[static_cast<size_t>(i)] + x;
    }
  const Tensor expected = Tensor::from_vector(expect, {n});
  for (int r = 0; r < W; ++r) {
    EXPECT_EQ(reduced[r], bytes_of(expected)) << r;
    EXPECT_EQ(avg_bf16[r], avg_bf16[0]) << r;
    EXPECT_EQ(broadcast[r], (std::vector<double>{20.0, 20.0})) << r;
    EXPECT_EQ(gathered[r], gathered[0]);
    for (int64_t i = 0; i < n; ++i) {
      EXPECT_EQ(gathered[r][static_cast<size_t>(i)], 0.5);
      EXPECT_EQ(gathered[r][static_cast<size_t>(2 * n + i)], 2.5);
      double sum = 0;
      for (int q = 0; q < W; ++q) sum += values(q, W * n)[static_cast<size_t>(r * n + i)];
      EXPECT_NEAR(scattered[r][static_cast<size_t>(i)], sum, 1e-5);
    }
  }
  // BF16 average: the F32 sum in rank order of the BF16 inputs, ×1/3, rounded to BF16.
  const std::vector<double> avg = [&] {
    Tensor t;
    for (int r = 0; r < W; ++r) {
      const Tensor x = Tensor::from_vector(values(r, n), {n}, DType::BF16).to(DType::F32);
      t = r == 0 ? x : ops::add(t, x);
    }
    return ops::scale(t, 1.0 / W).to(DType::BF16).to_vector_f64();
  }();
  Tensor got = Tensor::empty({n}, DType::BF16);
  std::memcpy(got.raw_data(), avg_bf16[0].data(), got.nbytes());
  EXPECT_EQ(got.to_vector_f64(), avg);
}

TEST(InProcessCommunicator, MismatchedCallsAndMissingRanksFailEveryRank) {
  // Rank 0 all-reduces while rank 1 all-gathers: both get the same error.
  auto errors = run_ranks(2, [&](int r, train::InProcessCommunicator& comm) {
    if (r == 0)
      comm.all_reduce(Tensor::zeros({2}), train::ReduceOp::Sum);
    else
      comm.all_gather(Tensor::zeros({1}), Tensor::zeros({2}));
  });
  for (const std::string& e : errors)
    EXPECT_NE(e.find("rank 1 called all_gather while rank 0 called all_reduce"), std::string::npos)
        << e;
  // Different sizes.
  errors = run_ranks(2, [&](int r, train::InProcessCommunicator& comm) {
    comm.all_reduce(Tensor::zeros({2 + r}), train::ReduceOp::Sum);
  });
  for (const std::string& e : errors)
    EXPECT_NE(e.find("rank 1 passed f32(3,)"), std::string::npos) << e;
  // Rank 1 never arrives: rank 0 times out naming it.
  errors = run_ranks(
      2,
      [&](int r, train::InProcessCommunicator& comm) {
        if (r == 0) comm.barrier();
      },
      0.2);
  EXPECT_NE(errors[0].find("waited"), std::string::npos) << errors[0];
  EXPECT_NE(errors[0].find("for rank(s) 1"), std::string::npos) << errors[0];
  // Bad arguments are caught before any rendezvous.
  auto comms = train::InProcessCommunicator::create_group(2);
  EXPECT_TRUE(throws_error(
      [&] {
        comms[0]->all_reduce(Tensor::zeros({2, 3}).transpose(0, 1), train::ReduceOp::Sum);
      },
      "all_reduce", {"rank 0", "not contiguous"}));
  EXPECT_TRUE(throws_error(
      [&] {
        comms[1]->reduce_scatter(Tensor::zeros({5}), Tensor::zeros({2}), train::ReduceOp::Sum);
      },
      "reduce_scatter", {"rank 1", "2 (world size)"}));
  EXPECT_TRUE(throws_error(
      [&] { comms[0]->all_gather(Tensor::zeros({2}), Tensor::zeros({4}, DType::BF16)); },
      "all_gather", {"differ in dtype"}));
}

// ---- environment -------------------------------------------------------------------------------

TEST(DistributedEnv, ReadsTorchrunVariables) {
  auto from = [](std::map<std::string, std::string> vars) {
    return train::read_distributed_env([vars = std::move(vars)](const char* name) -> const char* {
      auto it = vars.find(name);
      return it == vars.end() ? nullptr : it->second.c_str();
    });
  };
  const train::DistributedEnv single = from({});
  EXPECT_FALSE(single.is_set);
  EXPECT_EQ(single.world_size, 1);
  EXPECT_EQ(single.rank, 0);
  const train::DistributedEnv env = from({{"RANK", "5"},
                                          {"WORLD_SIZE", "8"},
                                          {"LOCAL_RANK", "1"},
                                          {"LOCAL_WORLD_SIZE", "4"},
                                          {"MASTER_ADDR", "node0"},
                                          {"MASTER_PORT", "1234"}});
  EXPECT_TRUE(env.is_set);
  EXPECT_EQ(env.rank, 5);
  EXPECT_EQ(env.world_size, 8);
  EXPECT_EQ(env.local_rank, 1);
  EXPECT_EQ(env.local_world_size, 4);
  EXPECT_EQ(env.master_addr, "node0");
  EXPECT_EQ(env.master_port, 1234);
  const train::DistributedEnv defaults = from({{"RANK", "1"}, {"WORLD_SIZE", "2"}});
  EXPECT_EQ(defaults.local_rank, 1);
  EXPECT_EQ(defaults.master_addr, "127.0.0.1");
  EXPECT_EQ(defaults.master_port, 29500);
  EXPECT_TRUE(throws_error(
      [&] {
        from({{"WORLD_SIZE", "2"}});
      },
      "distributed", {"RANK is not set"}));
  EXPECT_TRUE(throws_error(
      [&] {
        from({{"WORLD_SIZE", "two"}});
      },
      "distributed", {"WORLD_SIZE='two'"}));
  EXPECT_TRUE(throws_error(
      [&] {
        from({{"WORLD_SIZE", "2"}, {"RANK", "2"}});
      },
      "distributed", {"RANK=2", "[0, 1]"}));
  EXPECT_TRUE(throws_error(
      [&] {
        from({{"WORLD_SIZE", "2"}, {"RANK", "0"}, {"MASTER_PORT", "70000"}});
      },
      "distributed", {"MASTER_PORT=70000"}));
}

// ---- TCP rendezvous ----------------------------------------------------------------------------

namespace {
std::vector<uint8_t> random_blob(uint64_t seed) {
  Generator gen(seed);
  std::vector<uint8_t> blob(128);
  for (uint8_t& b : blob) b = static_cast<uint8_t>(gen.next_u64());
  return blob;
}
}  // namespace

TEST(TcpRendezvous, ThreadsReceiveRankZerosBlob) {
  const int W = 4;
  const std::vector<uint8_t> blob = random_blob(11);
  train::RendezvousServer server(0, W);
  ASSERT_GT(server.port(), 0);
  std::vector<std::vector<uint8_t>> got(W);
  std::vector<std::string> errors(W);
  std::vector<std::thread> clients;
  for (int r = 1; r < W; ++r)
    clients.emplace_back([&, r] {
      try {
        got[r] = train::fetch_rendezvous_blob("127.0.0.1", server.port(), r, W, 20);
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  // A stray connection that does not speak the protocol is ignored.
  {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(server.port()));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0)
      (void)!::write(fd, "GET / HTTP/1.0\r\n\r\n", 18);
    ::close(fd);
  }
  server.serve(blob, 20);
  for (std::thread& t : clients) t.join();
  for (int r = 1; r < W; ++r) {
    EXPECT_EQ(errors[r], "");
    EXPECT_EQ(got[r], blob) << r;
  }
}

TEST(TcpRendezvous, ProcessesExchangeThroughTheEnvironmentEntryPoint) {
  // A free port: bind port 0, read it, release it for the run.
  int port = 0;
  {
    train::RendezvousServer probe(0, 2);
    port = probe.port();
  }
  const int W = 3;
  const std::vector<uint8_t> blob = random_blob(12);
  std::vector<pid_t> children;
  for (int r = 1; r < W; ++r) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      // Child: fetch and exit 0 only when the bytes match.
      int code = 3;
      try {
        train::DistributedEnv env;
        env.rank = r;
        env.world_size = W;
        env.master_port = port;
        code = train::exchange_rendezvous_blob(env, {}, 20) == blob ? 0 : 2;
      } catch (...) {
        code = 1;
      }
      ::_exit(code);
    }
    ASSERT_GT(pid, 0);
    children.push_back(pid);
  }
  train::DistributedEnv env;
  env.world_size = W;
  env.master_port = port;
  EXPECT_EQ(train::exchange_rendezvous_blob(env, blob, 20), blob);
  for (pid_t pid : children) {
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
  }
}

TEST(TcpRendezvous, TimeoutsAndMismatchesAreClearErrors) {
  int port = 0;
  {
    train::RendezvousServer probe(0, 2);
    port = probe.port();
  }
  // Nobody listens: the client gives up after its timeout and names the address.
  EXPECT_TRUE(throws_error(
      [&] { train::fetch_rendezvous_blob("127.0.0.1", port, 1, 2, 0.3); }, "rendezvous",
      {"rank 1", "127.0.0.1:" + std::to_string(port), "within 0.3 s", "MASTER_ADDR"}));
  // Rank 2 of 3 never connects: rank 0 names it.
  {
    train::RendezvousServer server(0, 3);
    std::thread one([&] { train::fetch_rendezvous_blob("localhost", server.port(), 1, 3, 5); });
    EXPECT_TRUE(throws_error([&] { server.serve(random_blob(1), 1.0); }, "rendezvous",
                             {"rank(s) 2 did not connect", "1 of 2 did"}));
    one.join();
  }
  // A rank started with another world size is refused on both sides.
  {
    train::RendezvousServer server(0, 2);
    std::string client_error;
    std::thread other([&] {
      try {
        train::fetch_rendezvous_blob("127.0.0.1", server.port(), 1, 3, 5);
      } catch (const Error& e) {
        client_error = e.what();
      }
    });
    EXPECT_TRUE(throws_error([&] { server.serve(random_blob(2), 5.0); }, "rendezvous",
                             {"runs with world size 3, rank 0 with 2"}));
    other.join();
    EXPECT_NE(client_error.find("refused"), std::string::npos) << client_error;
  }
  // The port is taken.
  {
    train::RendezvousServer server(0, 2);
    EXPECT_TRUE(throws_error([&] { train::RendezvousServer second(server.port(), 2); },
                             "rendezvous", {"cannot listen on port", "Address already in use"}));
  }
}
