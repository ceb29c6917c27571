// Data-parallel training on the CPU with ranks as threads (InProcessCommunicator): W ranks ×
// batch B against one rank × batch W·B, bitwise agreement of the ranks after every step,
// overlap against no overlap, ZeRO-1 against plain, and checkpoints that resume at another
// world size.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "core/expect_error.h"
#include "microllm/io/safetensors.h"
#include "microllm/train/distributed/in_process_communicator.h"
#include "microllm/train/trainer.h"

using namespace microllm;
using microllm::testing::throws_error;
namespace fs = std::filesystem;

namespace {

fs::path temp_dir(const std::string& name) {
  const fs::path dir =
      fs::temp_directory_path() / ("microllm_dp_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

// qwen2 (q/k/v biases, tied embeddings) or llama (no biases, untied LM head).
model::ModelConfig tiny_config(const std::string& family = "qwen2") {
  return model::ModelConfig::from_json({{"model_type", family},
                                        {"vocab_size", 32},
                                        {"hidden_size", 32},
                                        {"intermediate_size", 48},
                                        {"num_hidden_layers", 2},
                                        {"num_attention_heads", 4},
                                        {"num_key_value_heads", 2},
                                        {"rms_norm_eps", 1e-6},
                                        {"rope_theta", 10000.0},
                                        {"tie_word_embeddings", family == "qwen2"}},
                                       "tiny");
}

const train::TokenFile& token_data() {
  static const train::TokenFile data = [] {
    const fs::path dir = temp_dir("data");
    Generator gen(9);
    std::vector<uint32_t> tokens(4000);
    for (uint32_t& t : tokens) t = static_cast<uint32_t>(gen.next_u64() % 32);
    train::write_token_file((dir / "data.bin").string(), tokens, 32);
    train::TokenFile f = train::load_token_file((dir / "data.bin").string(), 32);
    fs::remove_all(dir);
    return f;
  }();
  return data;
}

train::TrainOptions base_options(const std::string& optimizer = "sgd") {
  train::TrainOptions o;
  o.steps = 4;
  o.seq = 12;
  o.batch = 2;
  o.optimizer = optimizer;
  o.lr = optimizer == "sgd" ? 0.5 : 1e-2;
  o.warmup = 1;
  o.seed = 4;
  o.grad_clip = 1.0;
  return o;
}

// FNV-1a over every parameter's bytes in name order.
uint64_t checksum(const train::Trainer& t) {
  uint64_t h = 1469598103934665603ull;
  for (const auto& [name, p] : const_cast<train::Trainer&>(t).model().parameters()) {
    const auto* b = static_cast<const uint8_t*>(p.raw_data());
    for (size_t i = 0; i < p.nbytes(); ++i) h = (h ^ b[i]) * 1099511628211ull;
  }
  return h;
}

struct RankRun {
  std::vector<uint64_t> checksums;  // after every step
  std::vector<double> losses;
  std::map<std::string, Tensor> params;  // at the end
  int64_t buckets_started_in_backward = 0;
  std::string error;
};

using RankFn = std::function<void(int rank, train::Trainer&)>;

// Trains on W thread ranks. `before` runs after construction (resume, ...), `after` at the end.
std::vector<RankRun> train_ranks(int world, const model::ModelConfig& config,
                                 const train::TrainOptions& o, int64_t steps,
                                 const RankFn& before = nullptr, const RankFn& after = nullptr) {
  auto comms = train::InProcessCommunicator::create_group(world, Device::cpu(), 60);
  std::vector<RankRun> runs(static_cast<size_t>(world));
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      RankRun& run = runs[static_cast<size_t>(r)];
      try {
        train::Trainer trainer(config, o, comms[static_cast<size_t>(r)]);
        if (before) before(r, trainer);
        while (trainer.step() < steps) {
          run.losses.push_back(trainer.train_step(token_data()).loss);
          run.checksums.push_back(checksum(trainer));
          run.buckets_started_in_backward = trainer.data_parallel()->buckets_started_in_backward();
        }
        if (after) after(r, trainer);
        for (const auto& [name, p] : trainer.model().parameters()) run.params[name] = p.clone();
      } catch (const std::exception& e) {
        run.error = e.what();
        comms[static_cast<size_t>(r)]->group().abort("rank " + std::to_string(r) + " failed");
      }
    });
  }
  for (std::thread& t : threads) t.join();
  return runs;
}

// One process without a communicator.
RankRun train_single(const model::ModelConfig& config, const train::TrainOptions& o, int64_t steps,
                     const RankFn& before = nullptr) {
  RankRun run;
  train::Trainer trainer(config, o);
  if (before) before(0, trainer);
  while (trainer.step() < steps) {
    run.losses.push_back(trainer.train_step(token_data()).loss);
    run.checksums.push_back(checksum(trainer));
  }
  for (const auto& [name, p] : trainer.model().parameters()) run.params[name] = p.clone();
  return run;
}

double max_abs_diff(const std::map<std::string, Tensor>& a,
                    const std::map<std::string, Tensor>& b) {
  double worst = 0;
  for (const auto& [name, t] : a) {
    const std::vector<double> x = t.to_vector_f64(), y = b.at(name).to_vector_f64();
    for (size_t i = 0; i < x.size(); ++i) worst = std::max(worst, std::fabs(x[i] - y[i]));
  }
  return worst;
}

bool bitwise_equal(const std::map<std::string, Tensor>& a, const std::map<std::string, Tensor>& b) {
  for (const auto& [name, t] : a)
    if (std::memcmp(t.raw_data(), b.at(name).raw_data(), t.nbytes()) != 0) return false;
  return true;
}

// Every rank finished and held the same parameters after every step.
void expect_ranks_agree(const std::vector<RankRun>& runs) {
  for (size_t r = 0; r < runs.size(); ++r) {
    ASSERT_EQ(runs[r].error, "") << "rank " << r;
    EXPECT_EQ(runs[r].checksums, runs[0].checksums) << "rank " << r << " differs from rank 0";
    EXPECT_EQ(runs[r].losses, runs[0].losses) << "rank " << r;
  }
}

}  // namespace

TEST(DataParallel, WorldSizesOneTwoFourEqualOneRankWithTheGlobalBatch) {
  const model::ModelConfig config = tiny_config();
  for (int64_t accum : {1, 2}) {
    train::TrainOptions o = base_options("sgd");
    o.grad_accum = accum;
    for (int world : {1, 2, 4}) {
      train::TrainOptions global = o;
      global.batch = o.batch * world;
      const RankRun single = train_single(config, global, o.steps);
      const std::vector<RankRun> runs = train_ranks(world, config, o, o.steps);
      expect_ranks_agree(runs);
      EXPECT_LE(max_abs_diff(runs[0].params, single.params), 1e-5)
          << "world " << world << " accum " << accum;
      for (size_t i = 0; i < single.losses.size(); ++i)
        EXPECT_NEAR(runs[0].losses[i], single.losses[i], 1e-5)
            << "world " << world << " step " << i;
    }
  }
}

TEST(DataParallel, OneRankThroughTheCommunicatorIsBitwiseThePlainTrainer) {
  for (const char* optimizer : {"sgd", "adamw"}) {
    const train::TrainOptions o = base_options(optimizer);
    const RankRun plain = train_single(tiny_config(), o, o.steps);
    const std::vector<RankRun> one = train_ranks(1, tiny_config(), o, o.steps);
    ASSERT_EQ(one[0].error, "");
    EXPECT_EQ(one[0].checksums, plain.checksums) << optimizer;
    EXPECT_EQ(one[0].losses, plain.losses) << optimizer;
  }
}

// The same with the fused optimizer kernels (the CUDA default, forced here on the CPU): the
// gradient norm over the flat buffer and the clip scale inside the update.
TEST(DataParallel, OneRankThroughTheCommunicatorWithFusedKernelsIsBitwiseThePlainTrainer) {
  train::TrainOptions o = base_options("adamw");
  o.optimizer_kernels = "fused";
  const RankRun plain = train_single(tiny_config(), o, o.steps);
  const std::vector<RankRun> one = train_ranks(1, tiny_config(), o, o.steps);
  ASSERT_EQ(one[0].error, "");
  EXPECT_EQ(one[0].checksums, plain.checksums);
  EXPECT_EQ(one[0].losses, plain.losses);
}

TEST(DataParallel, AdamWAndBf16MatchTheGlobalBatch) {
  // AdamW normalizes each element's update, so elements whose true gradient is zero (qwen2's
  // k_proj bias: softmax ignores a constant shift) would turn rounding noise into full steps;
  // llama has no such parameter.
  const model::ModelConfig config = tiny_config("llama");
  train::TrainOptions o = base_options("adamw");
  train::TrainOptions global = o;
  global.batch = 2 * o.batch;
  const RankRun single = train_single(config, global, o.steps);
  const std::vector<RankRun> runs = train_ranks(2, config, o, o.steps);
  expect_ranks_agree(runs);
  EXPECT_LE(max_abs_diff(runs[0].params, single.params), 1e-4);

  // BF16 compute with F32 masters: gradients are averaged in BF16, so only loosely equal to
  // the single run, but every rank still holds the same bits.
  o.dtype = global.dtype = DType::BF16;
  const RankRun single_bf16 = train_single(config, global, o.steps);
  const std::vector<RankRun> runs_bf16 = train_ranks(2, config, o, o.steps);
  expect_ranks_agree(runs_bf16);
  EXPECT_LE(max_abs_diff(runs_bf16[0].params, single_bf16.params), 2e-2);
}

TEST(DataParallel, OverlapEqualsNoOverlapBitwise) {
  const model::ModelConfig config = tiny_config();
  train::TrainOptions o = base_options("adamw");
  o.data_parallel.bucket_mb = 4096.0 / (1 << 20);  // 4 KiB: many buckets
  const std::vector<RankRun> overlapped = train_ranks(2, config, o, o.steps);
  o.data_parallel.overlap = false;
  const std::vector<RankRun> after = train_ranks(2, config, o, o.steps);
  expect_ranks_agree(overlapped);
  expect_ranks_agree(after);
  EXPECT_EQ(overlapped[0].checksums, after[0].checksums);
  EXPECT_TRUE(bitwise_equal(overlapped[0].params, after[0].params));
  // With overlap, buckets start from the hooks while backward runs; without, none do.
  EXPECT_GT(overlapped[0].buckets_started_in_backward, 0);
  EXPECT_EQ(after[0].buckets_started_in_backward, 0);
}

TEST(DataParallel, ZeroOneEqualsPlainDataParallel) {
  const model::ModelConfig config = tiny_config();
  for (const char* optimizer : {"adamw", "sgd"}) {
    for (int world : {2, 4}) {
      train::TrainOptions o = base_options(optimizer);
      o.data_parallel.bucket_mb = 8192.0 / (1 << 20);  // shards cross parameter boundaries
      // Without clipping every element sees the same arithmetic: bitwise equal.
      o.grad_clip = 0;
      const std::vector<RankRun> plain = train_ranks(world, config, o, o.steps);
      o.data_parallel.zero1 = true;
      const std::vector<RankRun> zero = train_ranks(world, config, o, o.steps);
      expect_ranks_agree(plain);
      expect_ranks_agree(zero);
      EXPECT_TRUE(bitwise_equal(zero[0].params, plain[0].params))
          << optimizer << " world " << world;
      // With clipping the global norm is summed shard by shard: equal within rounding.
      o.grad_clip = 0.5;
      const std::vector<RankRun> zero_clip = train_ranks(world, config, o, o.steps);
      o.data_parallel.zero1 = false;
      const std::vector<RankRun> plain_clip = train_ranks(world, config, o, o.steps);
      expect_ranks_agree(zero_clip);
      EXPECT_LE(max_abs_diff(zero_clip[0].params, plain_clip[0].params), 1e-5)
          << optimizer << " world " << world;
    }
  }
  // BF16 parameters with F32 master shards.
  train::TrainOptions o = base_options("adamw");
  o.dtype = DType::BF16;
  o.grad_clip = 0;
  const std::vector<RankRun> plain = train_ranks(2, config, o, o.steps);
  o.data_parallel.zero1 = true;
  const std::vector<RankRun> zero = train_ranks(2, config, o, o.steps);
  expect_ranks_agree(zero);
  EXPECT_TRUE(bitwise_equal(zero[0].params, plain[0].params));
}

TEST(DataParallel, CheckpointFromTwoRanksResumesAtOneAndFour) {
  const fs::path dir = temp_dir("resume");
  const model::ModelConfig config = tiny_config();
  const train::TrainOptions o = base_options("sgd");  // 4 steps, batch 2 per rank
  train::TrainOptions global = o;
  global.batch = 2 * o.batch;
  const RankRun straight = train_single(config, global, o.steps);

  for (bool zero1 : {false, true}) {
    const fs::path ckpt = dir / (zero1 ? "zero" : "plain");
    train::TrainOptions half = o;
    half.data_parallel.zero1 = zero1;
    const auto save = [&](int, train::Trainer& t) { t.save_checkpoint(ckpt.string()); };
    const std::vector<RankRun> first = train_ranks(2, config, half, o.steps / 2, nullptr, save);
    expect_ranks_agree(first);
    // The same layout as a single-process checkpoint: names, shapes, dtypes.
    const fs::path single_ckpt = dir / "single";
    {
      train::Trainer single(config, global);
      single.train_step(token_data());
      single.save_checkpoint(single_ckpt.string());
    }
    const io::SafetensorsFile ours =
        io::SafetensorsFile::open((ckpt / "checkpoint" / "optimizer.safetensors").string());
    const io::SafetensorsFile theirs =
        io::SafetensorsFile::open((single_ckpt / "checkpoint" / "optimizer.safetensors").string());
    ASSERT_EQ(ours.names(), theirs.names());
    for (const std::string& name : ours.names()) {
      EXPECT_EQ(ours.tensor(name).shape(), theirs.tensor(name).shape()) << name;
      EXPECT_EQ(ours.tensor(name).dtype(), theirs.tensor(name).dtype()) << name;
    }
    std::ifstream state_in(ckpt / "checkpoint" / "trainer_state.json");
    const nlohmann::json state = nlohmann::json::parse(state_in);
    EXPECT_EQ(state.at("data_windows"), 2 * o.batch * 2);  // 2 steps × 2 ranks × batch 2
    EXPECT_EQ(state.at("options").at("world_size"), 2);

    // World size 1 with batch 4 continues the run.
    const auto resume = [&](int, train::Trainer& t) { t.resume(ckpt.string()); };
    const RankRun one = train_single(config, global, o.steps, resume);
    EXPECT_LE(max_abs_diff(one.params, straight.params), 1e-5) << (zero1 ? "zero1" : "plain");
    // World size 4 with batch 1 (ZeRO-1 when the checkpoint was).
    train::TrainOptions quarter = o;
    quarter.batch = 1;
    quarter.data_parallel.zero1 = zero1;
    const std::vector<RankRun> four = train_ranks(4, config, quarter, o.steps, resume);
    expect_ranks_agree(four);
    EXPECT_LE(max_abs_diff(four[0].params, straight.params), 1e-5) << (zero1 ? "zero1" : "plain");
    // The same world size continues bit for bit.
    const std::vector<RankRun> two = train_ranks(2, config, half, o.steps, resume);
    const std::vector<RankRun> two_straight = train_ranks(2, config, half, o.steps);
    expect_ranks_agree(two);
    EXPECT_TRUE(bitwise_equal(two[0].params, two_straight[0].params))
        << (zero1 ? "zero1" : "plain");
  }
  // Another number of windows per step is refused.
  train::Trainer other(config, o);  // batch 2 × 1 rank: 2 windows, the checkpoint has 4
  EXPECT_TRUE(throws_error([&] { other.resume((dir / "plain").string()); }, "resume",
                           {"4 windows per step", "world size 2", "this run has 2"}));
  fs::remove_all(dir);
}

TEST(DataParallel, StageTimesAreReported) {
  const train::TrainOptions o = base_options("sgd");
  std::vector<train::StepStats> stats(2);
  auto comms = train::InProcessCommunicator::create_group(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      train::Trainer t(tiny_config(), o, comms[static_cast<size_t>(r)]);
      stats[static_cast<size_t>(r)] = t.train_step(token_data());
    });
  for (std::thread& t : threads) t.join();
  for (const train::StepStats& s : stats) {
    EXPECT_GT(s.stages[train::Stage::Forward], 0);
    EXPECT_GT(s.stages[train::Stage::Backward], 0);
    EXPECT_GE(s.stages[train::Stage::CommWait], 0);
    EXPECT_GT(s.stages[train::Stage::Optimizer], 0);
    EXPECT_LE(s.stages[train::Stage::Forward] + s.stages[train::Stage::Backward], s.seconds);
    EXPECT_EQ(s.tokens, 2 * o.batch * o.seq);  // over both ranks
  }
  EXPECT_TRUE(throws_error(
      [&] {
        train::TrainOptions z = o;
        z.data_parallel.zero1 = true;
        train::Trainer t(tiny_config(), z);
      },
      "train", {"ZeRO-1 needs data parallelism"}));
}
