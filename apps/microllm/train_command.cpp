// `microllm train` and `microllm eval`: the training loop and held-out evaluation on token
// files (format microllm-tokens-v1).
//
// Data parallel: when WORLD_SIZE > 1 (set by `microllm launch` or torchrun) or with
// --distributed, each process is one rank on cuda:LOCAL_RANK; rank 0 hands NCCL's unique id
// to the others over the TCP rendezvous at MASTER_ADDR:MASTER_PORT. Only rank 0 prints and
// writes files; errors name the rank. docs/distributed.md.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "microllm/io/safetensors.h"
#include "microllm/train/distributed/environment.h"
#include "microllm/train/distributed/tcp_rendezvous.h"
#include "microllm/train/trainer.h"
#if MICROLLM_WITH_NCCL
#include "microllm/train/distributed/nccl_communicator.h"
#endif
#if MICROLLM_WITH_CUDA
#include "microllm/cuda/allocator.h"
#endif

namespace microllm::app {
namespace {

struct TrainCli {
  std::string config, data, val, out, init_from, resume, device = "cpu", dtype = "f32";
  std::string metrics;  // JSON lines: one per step and one per validation pass
  train::TrainOptions options;
  int64_t log_every = 10, eval_every = 0, eval_batches = 4, checkpoint_every = 0;
  bool no_overlap = false, distributed = false;
  double dist_timeout = 300.0;
};

// This process's communicator in a data-parallel run (NCCL on cuda:LOCAL_RANK); sets the
// device the rank trains on.
std::shared_ptr<train::Communicator> make_communicator(const TrainCli& cli,
                                                       const train::DistributedEnv& env,
                                                       Device& device) {
#if MICROLLM_WITH_NCCL
  MICROLLM_CHECK(
      device.is_cuda(), "train", "data-parallel training (WORLD_SIZE=", env.world_size,
      ") runs over NCCL on CUDA devices: pass --device cuda (each rank uses cuda:LOCAL_RANK)");
  device = Device::cuda(env.local_rank);
  train::NcclUniqueId id{};
  if (env.rank == 0) id = train::nccl_unique_id();
  const std::vector<uint8_t> blob = train::exchange_rendezvous_blob(
      env, std::vector<uint8_t>(id.begin(), id.end()), cli.dist_timeout);
  MICROLLM_CHECK(blob.size() == id.size(), "train", "the rendezvous returned ", blob.size(),
                 " bytes, expected ", id.size(), " (an NCCL unique id)");
  std::copy(blob.begin(), blob.end(), id.begin());
  return std::make_shared<train::NcclCommunicator>(id, env.rank, env.world_size, device);
#else
  (void)cli;
  (void)device;
  MICROLLM_FAIL("train", "data-parallel training (WORLD_SIZE=", env.world_size,
                ") needs NCCL, and this microllm was built without it (configure with "
                "-DMICROLLM_WITH_CUDA=ON "
                "-DMICROLLM_WITH_NCCL=ON)");
#endif
}

// Median per stage over the steps after the first (all of them when there is one),
// gathered from every rank; rank 0 prints one line per rank.
void print_stage_summary(const std::vector<train::StepStats>& steps, train::Communicator* comm) {
  if (steps.empty()) return;
  const size_t skip = steps.size() > 1 ? 1 : 0;
  std::vector<double> medians(train::kStageCount);
  for (int k = 0; k < train::kStageCount; ++k) {
    std::vector<double> v;
    for (size_t i = skip; i < steps.size(); ++i)
      v.push_back(steps[i].stages.seconds[static_cast<size_t>(k)] * 1e3);
    std::sort(v.begin(), v.end());
    medians[static_cast<size_t>(k)] = v[v.size() / 2];
  }
  std::vector<double> all = medians;  // (W·stages) in ms
  if (comm) {
    const Tensor mine =
        Tensor::from_vector(medians, {train::kStageCount}, DType::F32, comm->device());
    Tensor gathered =
        Tensor::empty({comm->world_size() * train::kStageCount}, DType::F32, comm->device());
    comm->all_gather(mine, gathered);
    all = gathered.to_vector_f64();
    if (comm->rank() != 0) return;
  }
  std::printf("stage time per step, median of %zu step(s), ms:\n", steps.size() - skip);
  for (size_t r = 0; r < all.size() / train::kStageCount; ++r) {
    std::printf("  rank %zu", r);
    for (int k = 0; k < train::kStageCount; ++k)
      std::printf("  %s %.3f", train::stage_name(static_cast<train::Stage>(k)),
                  all[r * train::kStageCount + k]);
    std::printf("\n");
  }
}

int run_train_rank(TrainCli& cli, const train::DistributedEnv& env, bool distributed) {
  train::TrainOptions& o = cli.options;
  o.device = Device::parse(cli.device);
  o.dtype = dtype_from_name(cli.dtype);
  o.data_parallel.overlap = !cli.no_overlap;
  MICROLLM_CHECK(distributed || !o.data_parallel.zero1, "train",
                 "--zero1 shards the optimizer over data-parallel ranks: start the ranks with "
                 "`microllm launch`");
  const bool lead = env.rank == 0;
  MICROLLM_CHECK(cli.resume.empty() || cli.init_from.empty(), "train",
                 "--resume and --init-from exclude each other");
  // The model: --config, or the checkpoint's when resuming.
  const std::string config_path =
      !cli.config.empty() ? cli.config
      : !cli.resume.empty()
          ? (std::filesystem::path(cli.resume) / "checkpoint" / "config.json").string()
          : std::string();
  MICROLLM_CHECK(!config_path.empty(), "train", "--config is required (or --resume DIR)");
  const model::ModelConfig config = model::ModelConfig::load(config_path);
  const train::TokenFile data = train::load_token_file(cli.data, config.vocab_size);
  const bool has_val = !cli.val.empty();
  const train::TokenFile val =
      has_val ? train::load_token_file(cli.val, config.vocab_size) : train::TokenFile{};
  // Inputs are checked first: a bad flag or file fails every rank before the rendezvous.
  std::shared_ptr<train::Communicator> comm;
  if (distributed) comm = make_communicator(cli, env, o.device);

  train::Trainer trainer(config, o, comm);
  if (!cli.init_from.empty()) trainer.init_from(cli.init_from);
  if (!cli.resume.empty()) {
    trainer.resume(cli.resume);
    if (lead)
      std::printf("resumed from %s at step %lld\n", cli.resume.c_str(),
                  static_cast<long long>(trainer.step()));
  }
  if (lead) {
    std::printf(
        "training %s: %lld parameters on %s in %s, %lld steps of %lld×%lld tokens (×%lld "
        "accumulated)",
        config.model_type(), static_cast<long long>(model::parameter_count(config)),
        o.device.str().c_str(), std::string(dtype_name(o.dtype)).c_str(),
        static_cast<long long>(o.steps), static_cast<long long>(o.batch),
        static_cast<long long>(o.seq), static_cast<long long>(o.grad_accum));
    std::printf(comm ? " × %d ranks\n" : "\n", trainer.world_size());
    if (const train::DataParallel* dp = trainer.data_parallel())
      std::printf(
          "data parallel: %d ranks over %s, %zu gradient buckets of ≤ %g MiB, overlap %s, ZeRO-1 "
          "%s\n",
          comm->world_size(), comm->backend_name().c_str(), dp->buckets().size(),
          o.data_parallel.bucket_mb, o.data_parallel.overlap ? "on" : "off",
          o.data_parallel.zero1 ? "on" : "off");
    std::printf("%7s %10s %11s %10s %12s\n", "step", "loss", "lr", "grad norm", "tokens/s");
  }
  const std::string out = cli.out.empty() ? cli.resume : cli.out;
  // --metrics: appended to when resuming, so one file holds the whole run's curve.
  std::ofstream metrics;
  if (lead && !cli.metrics.empty()) {
    metrics.open(cli.metrics, cli.resume.empty() ? std::ios::trunc : std::ios::app);
    MICROLLM_CHECK(metrics.good(), "train", "cannot write --metrics file '", cli.metrics, "'");
  }
  const auto write_metrics = [&](const nlohmann::ordered_json& line) {
    if (!metrics.is_open()) return;
    metrics << line.dump() << "\n";
    metrics.flush();
  };
  std::vector<train::StepStats> history;
  while (trainer.step() < o.steps) {
    const train::StepStats s = trainer.train_step(data);
    history.push_back(s);
    if (lead && (s.step == 1 || s.step % cli.log_every == 0 || s.step == o.steps))
      std::printf("%7lld %10.4f %11.3e %10.4f %12.0f\n", static_cast<long long>(s.step), s.loss,
                  s.lr, s.grad_norm, static_cast<double>(s.tokens) / s.seconds);
    write_metrics({{"step", s.step},
                   {"loss", s.loss},
                   {"lr", s.lr},
                   {"grad_norm", s.grad_norm},
                   {"tokens", s.tokens},
                   {"seconds", s.seconds}});
    if (has_val && cli.eval_every > 0 && s.step % cli.eval_every == 0) {
      const double loss = trainer.evaluate(val, cli.eval_batches);
      if (lead) std::printf("        val loss %.4f, perplexity %.3f\n", loss, std::exp(loss));
      write_metrics({{"step", s.step}, {"val_loss", loss}});
    }
    if (!out.empty() && cli.checkpoint_every > 0 && s.step % cli.checkpoint_every == 0)
      trainer.save_checkpoint(out);
    std::fflush(stdout);
  }
  print_stage_summary(history, comm.get());
#if MICROLLM_WITH_CUDA
  if (lead && o.device.is_cuda()) {
    const cuda::AllocatorStats stats = cuda::allocator_stats(o.device);
    std::printf("peak device memory: %lld bytes allocated, %lld bytes reserved\n",
                static_cast<long long>(stats.peak_allocated_bytes),
                static_cast<long long>(stats.peak_reserved_bytes));
  }
#endif
  if (has_val) {
    const double loss = trainer.evaluate(val, cli.eval_batches);
    if (lead) std::printf("final val loss %.4f, perplexity %.3f\n", loss, std::exp(loss));
    write_metrics({{"step", trainer.step()}, {"val_loss", loss}, {"final", true}});
  }
  if (!out.empty()) {
    trainer.save_checkpoint(out);
    trainer.save_model(out);
    if (lead) std::printf("wrote %s/model.safetensors, config.json and checkpoint/\n", out.c_str());
  }
  std::fflush(stdout);
  return 0;
}

int run_train(TrainCli& cli) {
  const train::DistributedEnv env = train::read_distributed_env();
  const bool distributed = cli.distributed || env.world_size > 1;
  if (!distributed) return run_train_rank(cli, env, false);
  try {
    return run_train_rank(cli, env, true);
  } catch (const Error& e) {
    throw Error("rank " + std::to_string(env.rank), e.what());  // which process failed
  }
}

struct EvalCli {
  std::string model, data, device = "cpu", dtype = "f32";
  int64_t seq = 128, batch = 8, batches = 8;
  uint64_t seed = 0;
  bool json = false;
};

int run_eval(const EvalCli& cli) {
  const model::ModelConfig config = model::ModelConfig::load(cli.model);
  const train::TokenFile data = train::load_token_file(cli.data, config.vocab_size);
  train::TrainOptions o;
  o.batch = cli.batch;
  o.seq = cli.seq;
  o.seed = cli.seed;
  o.device = Device::parse(cli.device);
  o.dtype = dtype_from_name(cli.dtype);
  train::Trainer trainer(config, o);
  trainer.init_from(cli.model);
  const double loss = trainer.evaluate(data, cli.batches);
  if (cli.json) {
    std::cout << nlohmann::json{{"model", cli.model},
                                {"data", cli.data},
                                {"data_sha256", data.sha256},
                                {"seq", cli.seq},
                                {"batch", cli.batch},
                                {"batches", cli.batches},
                                {"loss", loss},
                                {"perplexity", std::exp(loss)}}
                     .dump(2)
              << "\n";
  } else {
    std::printf("loss %.6f, perplexity %.4f over %lld windows of %lld tokens\n", loss,
                std::exp(loss), static_cast<long long>(cli.batch * cli.batches),
                static_cast<long long>(cli.seq));
  }
  return 0;
}

}  // namespace

Command add_train_command(CLI::App& parent) {
  auto c = std::make_shared<TrainCli>();
  train::TrainOptions& o = c->options;
  CLI::App* cmd = parent.add_subcommand("train", "Train a model on a token file");
  cmd->add_option("--config", c->config, "model config.json (or a folder holding one)");
  cmd->add_option("--data", c->data, "training token file (NAME.bin with NAME.bin.json)")
      ->required();
  cmd->add_option("--val", c->val, "validation token file");
  cmd->add_option("--steps", o.steps, "total optimizer steps")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--batch", o.batch, "sequences per micro-batch")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--seq", o.seq, "tokens per sequence")
      ->check(CLI::Range(int64_t(2), int64_t(1) << 20))
      ->capture_default_str();
  cmd->add_option("--grad-accum", o.grad_accum, "micro-batches per step")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--lr", o.lr, "peak learning rate")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--min-lr-ratio", o.min_lr_ratio, "cosine floor / peak")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  cmd->add_option("--warmup", o.warmup, "linear warmup steps")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--optimizer", o.optimizer, "adamw or sgd")
      ->check(CLI::IsMember({"adamw", "sgd"}))
      ->capture_default_str();
  cmd->add_option("--weight-decay", o.adamw.weight_decay, "AdamW decoupled weight decay")
      ->capture_default_str();
  cmd->add_option("--momentum", o.sgd.momentum, "SGD momentum")->capture_default_str();
  cmd->add_option("--grad-clip", o.grad_clip, "global-norm clip (0: off)")->capture_default_str();
  cmd->add_option("--seed", o.seed, "seed for parameters and data order")->capture_default_str();
  cmd->add_option("--loss-chunk", o.loss_chunk,
                  "rows of the LM head and loss computed at a time, so the whole (batch·seq, "
                  "vocab) logits never exist (0: the whole logits)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option_function<std::string>(
         "--attention",
         [&o](const std::string& name) { o.attention = ops::parse_attention_backend(name); },
         "attention kernel: auto (flash on CUDA in bf16 for head dims 64 and 128), flash or "
         "reference (the materialized kernel)")
      ->check(CLI::IsMember({"auto", "flash", "reference"}))
      ->default_str("auto");
  cmd->add_flag("--recompute", o.recompute,
                "recompute each layer's activations in backward instead of keeping them (less "
                "memory, one more forward per step; the same gradients)");
  cmd->add_option("--optimizer-kernels", o.optimizer_kernels,
                  "auto (fused AdamW on CUDA), fused (multi-tensor AdamW and gradient norm) or "
                  "reference (elementwise operators)")
      ->check(CLI::IsMember({"auto", "fused", "reference"}))
      ->capture_default_str();
  cmd->add_option("--device", c->device, "cpu or cuda[:N]")->capture_default_str();
  cmd->add_option("--dtype", c->dtype, "f32 or bf16 (mixed precision, F32 master weights)")
      ->check(CLI::IsMember({"f32", "bf16"}))
      ->capture_default_str();
  cmd->add_option("--out", c->out,
                  "output folder: checkpoints, final model.safetensors + config.json");
  cmd->add_option("--init-from", c->init_from, "start from a Hugging Face folder's weights");
  cmd->add_option("--resume", c->resume, "continue the run whose checkpoint is in DIR");
  cmd->add_option("--log-every", c->log_every, "steps between log lines")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--eval-every", c->eval_every, "steps between validation passes (0: end only)")
      ->capture_default_str();
  cmd->add_option("--eval-batches", c->eval_batches, "validation batches")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--metrics", c->metrics,
                  "JSON-lines file: step, loss, lr, grad norm, tokens and seconds of every step; "
                  "val_loss per validation pass (appended to with --resume)");
  cmd->add_option("--checkpoint-every", c->checkpoint_every,
                  "steps between checkpoints (0: end only)")
      ->capture_default_str();
  // Data parallel (docs/distributed.md).
  cmd->add_flag("--distributed", c->distributed,
                "join a data-parallel run even at WORLD_SIZE=1 (implied by WORLD_SIZE > 1)");
  cmd->add_option("--bucket-mb", o.data_parallel.bucket_mb, "gradient all-reduce bucket size, MiB")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_flag("--no-overlap", c->no_overlap,
                "all-reduce gradients after backward instead of during it");
  cmd->add_flag("--zero1", o.data_parallel.zero1,
                "ZeRO-1: shard AdamW/SGD state and F32 master weights over ranks");
  cmd->add_option("--dist-timeout", c->dist_timeout,
                  "seconds to wait for the other ranks at the rendezvous")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  return {cmd, [c] { return run_train(*c); }};
}

Command add_eval_command(CLI::App& parent) {
  auto c = std::make_shared<EvalCli>();
  CLI::App* cmd = parent.add_subcommand("eval", "Loss and perplexity of a model on a token file");
  cmd->add_option("--model", c->model, "Hugging Face style folder (config.json + safetensors)")
      ->required();
  cmd->add_option("--data", c->data, "token file")->required();
  cmd->add_option("--seq", c->seq, "tokens per window")
      ->check(CLI::Range(int64_t(2), int64_t(1) << 20))
      ->capture_default_str();
  cmd->add_option("--batch", c->batch, "windows per batch")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--batches", c->batches, "batches")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--seed", c->seed, "seed of the window positions")->capture_default_str();
  cmd->add_option("--device", c->device, "cpu or cuda[:N]")->capture_default_str();
  cmd->add_option("--dtype", c->dtype, "f32 or bf16")
      ->check(CLI::IsMember({"f32", "bf16"}))
      ->capture_default_str();
  cmd->add_flag("--json", c->json, "machine-readable output");
  return {cmd, [c] { return run_eval(*c); }};
}

}  // namespace microllm::app
