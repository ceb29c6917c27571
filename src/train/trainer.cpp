// The training loop (see trainer.h).
#include "microllm/train/trainer.h"

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "microllm/autograd/node.h"
#include "microllm/io/safetensors.h"
#include "microllm/ops/cross_entropy.h"
#include "microllm/ops/elementwise.h"

namespace microllm::train {
namespace fs = std::filesystem;

Tensor sample_windows(const Tensor& tokens, int64_t seq, uint64_t seed, int64_t first_window,
                      int64_t count, Device device) {
  const int64_t n = tokens.numel();
  MICROLLM_CHECK(n >= seq + 1, "sample_windows", "the token file has ", n, " tokens; windows of ", seq + 1,
                 " need at least that many");
  const int32_t* p = tokens.data<int32_t>();
  std::vector<int64_t> out(static_cast<size_t>(count * (seq + 1)));
  Generator gen(seed);
  for (int64_t w = 0; w < count; ++w) {
    gen.set_state(seed, static_cast<uint64_t>(first_window + w));
    const int64_t start = static_cast<int64_t>(gen.next_u64() % static_cast<uint64_t>(n - seq));
    for (int64_t t = 0; t <= seq; ++t) out[w * (seq + 1) + t] = p[start + t];
  }
  return Tensor::from_vector(out, {count, seq + 1}, DType::I64, device);
}

Trainer::Trainer(const model::ModelConfig& config, TrainOptions options) : options_(std::move(options)) {
  const TrainOptions& o = options_;
  MICROLLM_CHECK(o.steps > 0 && o.batch > 0 && o.seq > 1 && o.grad_accum > 0, "train",
                 "steps, batch and grad_accum must be positive and seq > 1 (found steps ", o.steps,
                 ", batch ", o.batch, ", seq ", o.seq, ", grad_accum ", o.grad_accum, ")");
  MICROLLM_CHECK(o.dtype == DType::F32 || o.dtype == DType::BF16, "train", "dtype must be f32 or bf16, found ", o.dtype);
  MICROLLM_CHECK(o.lr > 0, "train", "learning rate must be positive, found ", o.lr);
  model_ = std::make_unique<model::Transformer>(config, o.device, o.dtype, o.seed);
  model_->set_requires_grad(true);
  if (o.optimizer == "adamw") optimizer_ = std::make_unique<AdamW>(model_->parameters(), o.adamw);
  else if (o.optimizer == "sgd") optimizer_ = std::make_unique<Sgd>(model_->parameters(), o.sgd);
  else MICROLLM_FAIL("train", "unknown optimizer '", o.optimizer, "' (expected adamw or sgd)");
}

void Trainer::init_from(const std::string& dir) {
  const io::SafetensorsCheckpoint checkpoint = io::open_checkpoint(dir);
  {
    autograd::NoGradGuard no_grad;
    io::load_into(model_->parameters(), checkpoint, /*strict=*/true);
  }
  // The optimizer's master weights start from the loaded parameters.
  std::map<std::string, Tensor> state;
  for (const auto& [name, p] : model_->parameters()) state["master." + name] = p.detach().to(DType::F32);
  for (const auto& [name, t] : optimizer_->state())
    if (!state.count(name)) state[name] = t;
  optimizer_->load_state(state, 0);
}

StepStats Trainer::train_step(const TokenFile& data) {
  const TrainOptions& o = options_;
  const auto start = std::chrono::steady_clock::now();
  const int64_t step = step_ + 1;
  const double lr = warmup_cosine_lr(step, o.warmup, o.steps, o.lr, o.lr * o.min_lr_ratio);
  optimizer_->zero_grad();
  Tensor loss_sum;
  for (int64_t micro = 0; micro < o.grad_accum; ++micro) {
    const int64_t first = (step_ * o.grad_accum + micro) * o.batch;  // windows consumed before this one
    const Tensor windows = sample_windows(data.tokens, o.seq, o.seed, first, o.batch, o.device);  // (B, T+1)
    const Tensor inputs = windows.narrow(1, 0, o.seq).contiguous();   // (B, T)
    const Tensor targets = windows.narrow(1, 1, o.seq).contiguous();  // (B, T)
    const Tensor logits = model_->forward(inputs);                    // (B, T, V)
    const Tensor loss = ops::cross_entropy(logits.reshape({o.batch * o.seq, -1}), targets.reshape({-1}));
    // Each micro-batch contributes 1/k of the mean, so k micro-batches equal one k× batch.
    ops::scale(loss, 1.0 / static_cast<double>(o.grad_accum)).backward();
    const Tensor detached = loss.detach().to(DType::F32);
    loss_sum = loss_sum.defined() ? ops::add(loss_sum, detached) : detached;
  }
  StepStats stats;
  stats.grad_norm = clip_grad_norm(model_->parameters(), o.grad_clip);
  optimizer_->step(lr);
  optimizer_->zero_grad();
  step_ = step;
  stats.step = step;
  stats.lr = lr;
  stats.loss = loss_sum.item() / static_cast<double>(o.grad_accum);  // one device read per step
  stats.tokens = o.batch * o.seq * o.grad_accum;
  stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return stats;
}

double Trainer::evaluate(const TokenFile& data, int64_t batches) {
  autograd::NoGradGuard no_grad;
  const TrainOptions& o = options_;
  double total = 0;
  for (int64_t b = 0; b < batches; ++b) {
    // Evaluation windows come from their own stream, the same on every call.
    const Tensor windows = sample_windows(data.tokens, o.seq, o.seed ^ 0x5eed5eedull, b * o.batch, o.batch, o.device);
    const Tensor logits = model_->forward(windows.narrow(1, 0, o.seq).contiguous());
    total += ops::cross_entropy(logits.reshape({o.batch * o.seq, -1}),
                                windows.narrow(1, 1, o.seq).contiguous().reshape({-1}))
                 .item();
  }
  return total / static_cast<double>(batches);
}

namespace {

void write_text(const fs::path& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  MICROLLM_CHECK(out.good(), "checkpoint", "cannot write ", path.string());
}

nlohmann::json options_json(const TrainOptions& o) {
  return {{"steps", o.steps}, {"batch", o.batch}, {"seq", o.seq}, {"grad_accum", o.grad_accum},
          {"lr", o.lr}, {"min_lr_ratio", o.min_lr_ratio}, {"warmup", o.warmup},
          {"optimizer", o.optimizer}, {"grad_clip", o.grad_clip}, {"seed", o.seed},
          {"device", o.device.str()}, {"dtype", dtype_name(o.dtype)},
          {"adamw", {{"beta1", o.adamw.beta1}, {"beta2", o.adamw.beta2}, {"eps", o.adamw.eps},
                     {"weight_decay", o.adamw.weight_decay}}},
          {"sgd", {{"momentum", o.sgd.momentum}, {"weight_decay", o.sgd.weight_decay}}}};
}

}  // namespace

void Trainer::save_checkpoint(const std::string& dir) const {
  const fs::path final_dir = fs::path(dir) / "checkpoint";
  const fs::path tmp = fs::path(dir) / "checkpoint.tmp";
  const fs::path old = fs::path(dir) / "checkpoint.old";
  fs::remove_all(tmp);
  fs::create_directories(tmp);
  io::NamedTensors state;
  for (const auto& [name, t] : optimizer_->state()) state.emplace_back(name, t);
  io::save_safetensors((tmp / "optimizer.safetensors").string(), state);
  const nlohmann::json trainer_state = {
      {"format", "microllm-checkpoint-v1"},
      {"step", step_},
      {"optimizer_steps", optimizer_->steps_taken()},
      // Windows consumed so far; the sampler's generator state is (seed, this count).
      {"data_windows", step_ * options_.grad_accum * options_.batch},
      {"options", options_json(options_)}};
  write_text(tmp / "trainer_state.json", trainer_state.dump(2) + "\n");
  write_text(tmp / "config.json", model_->config().to_json().dump(2) + "\n");
  // Swap in the new checkpoint; the previous one survives until the new one is in place.
  fs::remove_all(old);
  if (fs::exists(final_dir)) fs::rename(final_dir, old);
  fs::rename(tmp, final_dir);
  fs::remove_all(old);
}

void Trainer::resume(const std::string& dir) {
  const fs::path cdir = fs::path(dir) / "checkpoint";
  std::ifstream in(cdir / "trainer_state.json");
  MICROLLM_CHECK(in.good(), "resume", "no checkpoint in ", dir, " (expected ", (cdir / "trainer_state.json").string(), ")");
  const nlohmann::json s = nlohmann::json::parse(in);
  MICROLLM_CHECK(s.value("format", "") == "microllm-checkpoint-v1", "resume", (cdir / "trainer_state.json").string(),
                 ": unknown format ", s.value("format", "(none)"));
  const nlohmann::json& saved = s.at("options");
  // The run's shape must match: these decide the data windows and the update.
  for (const char* key : {"batch", "seq", "grad_accum", "seed", "optimizer", "dtype"})
    MICROLLM_CHECK(saved.at(key) == options_json(options_).at(key), "resume", "checkpoint was made with ", key,
                   " = ", saved.at(key).dump(), ", this run has ", options_json(options_).at(key).dump());
  const model::ModelConfig saved_config = model::ModelConfig::load((cdir / "config.json").string());
  MICROLLM_CHECK(saved_config.to_json() == model_->config().to_json(), "resume",
                 "checkpoint config differs from this run's config");
  const io::SafetensorsFile file = io::SafetensorsFile::open((cdir / "optimizer.safetensors").string());
  std::map<std::string, Tensor> tensors;
  for (const std::string& name : file.names()) tensors[name] = file.tensor(name);
  optimizer_->load_state(tensors, s.at("optimizer_steps").get<int64_t>());
  step_ = s.at("step").get<int64_t>();
}

void Trainer::save_model(const std::string& dir) const {
  fs::create_directories(dir);
  io::NamedTensors named;
  for (const auto& [name, p] : model_->parameters()) named.emplace_back(name, p.detach());
  io::save_safetensors((fs::path(dir) / "model.safetensors").string(), named, {{"format", "pt"}});
  write_text(fs::path(dir) / "config.json", model_->config().to_json().dump(2) + "\n");
}

}  // namespace microllm::train
