// `microllm train` and `microllm eval`: the training loop and held-out evaluation on token
// files (format microllm-tokens-v1).
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "microllm/io/safetensors.h"
#include "microllm/train/trainer.h"

namespace microllm::app {
namespace {

struct TrainCli {
  std::string config, data, val, out, init_from, resume, device = "cpu", dtype = "f32";
  train::TrainOptions options;
  int64_t log_every = 10, eval_every = 0, eval_batches = 4, checkpoint_every = 0;
};

int run_train(TrainCli& cli) {
  train::TrainOptions& o = cli.options;
  o.device = Device::parse(cli.device);
  o.dtype = dtype_from_name(cli.dtype);
  MICROLLM_CHECK(cli.resume.empty() || cli.init_from.empty(), "train", "--resume and --init-from exclude each other");
  // The model: --config, or the checkpoint's when resuming.
  const std::string config_path = !cli.config.empty() ? cli.config
                                  : !cli.resume.empty() ? (std::filesystem::path(cli.resume) / "checkpoint" / "config.json").string()
                                                        : std::string();
  MICROLLM_CHECK(!config_path.empty(), "train", "--config is required (or --resume DIR)");
  const model::ModelConfig config = model::ModelConfig::load(config_path);
  const train::TokenFile data = train::load_token_file(cli.data, config.vocab_size);
  const bool has_val = !cli.val.empty();
  const train::TokenFile val = has_val ? train::load_token_file(cli.val, config.vocab_size) : train::TokenFile{};

  train::Trainer trainer(config, o);
  if (!cli.init_from.empty()) trainer.init_from(cli.init_from);
  if (!cli.resume.empty()) {
    trainer.resume(cli.resume);
    std::printf("resumed from %s at step %lld\n", cli.resume.c_str(), static_cast<long long>(trainer.step()));
  }
  std::printf("training %s: %lld parameters on %s in %s, %lld steps of %lld×%lld tokens (×%lld accumulated)\n",
              config.model_type(), static_cast<long long>(model::parameter_count(config)), o.device.str().c_str(),
              std::string(dtype_name(o.dtype)).c_str(), static_cast<long long>(o.steps),
              static_cast<long long>(o.batch), static_cast<long long>(o.seq), static_cast<long long>(o.grad_accum));
  std::printf("%7s %10s %11s %10s %12s\n", "step", "loss", "lr", "grad norm", "tokens/s");
  const std::string out = cli.out.empty() ? cli.resume : cli.out;
  while (trainer.step() < o.steps) {
    const train::StepStats s = trainer.train_step(data);
    if (s.step == 1 || s.step % cli.log_every == 0 || s.step == o.steps)
      std::printf("%7lld %10.4f %11.3e %10.4f %12.0f\n", static_cast<long long>(s.step), s.loss, s.lr, s.grad_norm,
                  static_cast<double>(s.tokens) / s.seconds);
    if (has_val && cli.eval_every > 0 && s.step % cli.eval_every == 0) {
      const double loss = trainer.evaluate(val, cli.eval_batches);
      std::printf("        val loss %.4f, perplexity %.3f\n", loss, std::exp(loss));
    }
    if (!out.empty() && cli.checkpoint_every > 0 && s.step % cli.checkpoint_every == 0) trainer.save_checkpoint(out);
    std::fflush(stdout);
  }
  if (has_val) {
    const double loss = trainer.evaluate(val, cli.eval_batches);
    std::printf("final val loss %.4f, perplexity %.3f\n", loss, std::exp(loss));
  }
  if (!out.empty()) {
    trainer.save_checkpoint(out);
    trainer.save_model(out);
    std::printf("wrote %s/model.safetensors, config.json and checkpoint/\n", out.c_str());
  }
  return 0;
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
    std::cout << nlohmann::json{{"model", cli.model}, {"data", cli.data}, {"data_sha256", data.sha256},
                                {"seq", cli.seq}, {"batch", cli.batch}, {"batches", cli.batches},
                                {"loss", loss}, {"perplexity", std::exp(loss)}}.dump(2)
              << "\n";
  } else {
    std::printf("loss %.6f, perplexity %.4f over %lld windows of %lld tokens\n", loss, std::exp(loss),
                static_cast<long long>(cli.batch * cli.batches), static_cast<long long>(cli.seq));
  }
  return 0;
}

}  // namespace

Command add_train_command(CLI::App& parent) {
  auto c = std::make_shared<TrainCli>();
  train::TrainOptions& o = c->options;
  CLI::App* cmd = parent.add_subcommand("train", "Train a model on a token file");
  cmd->add_option("--config", c->config, "model config.json (or a folder holding one)");
  cmd->add_option("--data", c->data, "training token file (NAME.bin with NAME.bin.json)")->required();
  cmd->add_option("--val", c->val, "validation token file");
  cmd->add_option("--steps", o.steps, "total optimizer steps")->check(CLI::PositiveNumber)->capture_default_str();
  cmd->add_option("--batch", o.batch, "sequences per micro-batch")->check(CLI::PositiveNumber)->capture_default_str();
  cmd->add_option("--seq", o.seq, "tokens per sequence")->check(CLI::Range(int64_t(2), int64_t(1) << 20))->capture_default_str();
  cmd->add_option("--grad-accum", o.grad_accum, "micro-batches per step")->check(CLI::PositiveNumber)->capture_default_str();
  cmd->add_option("--lr", o.lr, "peak learning rate")->check(CLI::PositiveNumber)->capture_default_str();
  cmd->add_option("--min-lr-ratio", o.min_lr_ratio, "cosine floor / peak")->check(CLI::Range(0.0, 1.0))->capture_default_str();
  cmd->add_option("--warmup", o.warmup, "linear warmup steps")->check(CLI::NonNegativeNumber)->capture_default_str();
  cmd->add_option("--optimizer", o.optimizer, "adamw or sgd")->check(CLI::IsMember({"adamw", "sgd"}))->capture_default_str();
  cmd->add_option("--weight-decay", o.adamw.weight_decay, "AdamW decoupled weight decay")->capture_default_str();
  cmd->add_option("--momentum", o.sgd.momentum, "SGD momentum")->capture_default_str();
  cmd->add_option("--grad-clip", o.grad_clip, "global-norm clip (0: off)")->capture_default_str();
  cmd->add_option("--seed", o.seed, "seed for parameters and data order")->capture_default_str();
  cmd->add_option("--device", c->device, "cpu or cuda[:N]")->capture_default_str();
  cmd->add_option("--dtype", c->dtype, "f32 or bf16 (mixed precision, F32 master weights)")
      ->check(CLI::IsMember({"f32", "bf16"}))->capture_default_str();
  cmd->add_option("--out", c->out, "output folder: checkpoints, final model.safetensors + config.json");
  cmd->add_option("--init-from", c->init_from, "start from a Hugging Face folder's weights");
  cmd->add_option("--resume", c->resume, "continue the run whose checkpoint is in DIR");
  cmd->add_option("--log-every", c->log_every, "steps between log lines")->check(CLI::PositiveNumber)->capture_default_str();
  cmd->add_option("--eval-every", c->eval_every, "steps between validation passes (0: end only)")->capture_default_str();
  cmd->add_option("--eval-batches", c->eval_batches, "validation batches")->check(CLI::PositiveNumber)->capture_default_str();
  cmd->add_option("--checkpoint-every", c->checkpoint_every, "steps between checkpoints (0: end only)")->capture_default_str();
  return {cmd, [c] { return run_train(*c); }};
}

Command add_eval_command(CLI::App& parent) {
  auto c = std::make_shared<EvalCli>();
  CLI::App* cmd = parent.add_subcommand("eval", "Loss and perplexity of a model on a token file");
  cmd->add_option("--model", c->model, "Hugging Face style folder (config.json + safetensors)")->required();
  cmd->add_option("--data", c->data, "token file")->required();
  cmd->add_option("--seq", c->seq, "tokens per window")->check(CLI::Range(int64_t(2), int64_t(1) << 20))->capture_default_str();
  cmd->add_option("--batch", c->batch, "windows per batch")->check(CLI::PositiveNumber)->capture_default_str();
  cmd->add_option("--batches", c->batches, "batches")->check(CLI::PositiveNumber)->capture_default_str();
  cmd->add_option("--seed", c->seed, "seed of the window positions")->capture_default_str();
  cmd->add_option("--device", c->device, "cpu or cuda[:N]")->capture_default_str();
  cmd->add_option("--dtype", c->dtype, "f32 or bf16")->check(CLI::IsMember({"f32", "bf16"}))->capture_default_str();
  cmd->add_flag("--json", c->json, "machine-readable output");
  return {cmd, [c] { return run_eval(*c); }};
}

}  // namespace microllm::app
