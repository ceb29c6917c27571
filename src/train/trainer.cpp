// The training loop (see trainer.h).
#include "microllm/train/trainer.h"

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "microllm/autograd/node.h"
#include "microllm/core/switch.h"
#include "microllm/io/safetensors.h"
#include "microllm/ops/cross_entropy.h"
#include "microllm/ops/elementwise.h"

namespace microllm::train {
namespace fs = std::filesystem;

Tensor sample_windows(const Tensor& tokens, int64_t seq, uint64_t seed, int64_t first_window,
                      int64_t count, Device device) {
  const int64_t n = tokens.numel();
  MICROLLM_CHECK(n >= seq + 1, "sample_windows", "the token file has ", n, " tokens; windows of ",
                 seq + 1, " need at least that many");
  const int32_t* p = tokens.data<int32_t>();                         // (N) token ids
  std::vector<int64_t> out(static_cast<size_t>(count * (seq + 1)));  // (count, seq + 1)
  Generator gen(seed);
  for (int64_t w = 0; w < count; ++w) {
    gen.set_state(seed, static_cast<uint64_t>(first_window + w));
    const int64_t start = static_cast<int64_t>(gen.next_u64() % static_cast<uint64_t>(n - seq));
    for (int64_t t = 0; t <= seq; ++t) out[w * (seq + 1) + t] = p[start + t];
  }
  return Tensor::from_vector(out, {count, seq + 1}, DType::I64, device);
}

int64_t first_window(int64_t steps_done, int64_t micro, int64_t grad_accum, int64_t batch, int rank,
                     int world_size) {
  return ((steps_done * grad_accum + micro) * world_size + rank) * batch;
}

Trainer::Trainer(const model::ModelConfig& config, TrainOptions options,
                 std::shared_ptr<Communicator> comm)
    : options_(std::move(options)), comm_(std::move(comm)), timer_(options_.device) {
  const TrainOptions& o = options_;
  MICROLLM_CHECK(o.steps > 0 && o.batch > 0 && o.seq > 1 && o.grad_accum > 0, "train",
                 "steps, batch and grad_accum must be positive and seq > 1 (found steps ", o.steps,
                 ", batch ", o.batch, ", seq ", o.seq, ", grad_accum ", o.grad_accum, ")");
  MICROLLM_CHECK(o.dtype == DType::F32 || o.dtype == DType::BF16, "train",
                 "dtype must be f32 or bf16, found ", o.dtype);
  MICROLLM_CHECK(o.lr > 0, "train", "learning rate must be positive, found ", o.lr);
  MICROLLM_CHECK(o.optimizer == "adamw" || o.optimizer == "sgd", "train", "unknown optimizer '",
                 o.optimizer, "' (expected adamw or sgd)");
  MICROLLM_CHECK(!comm_ || comm_->device() == o.device, "train", "the communicator works on ",
                 comm_ ? comm_->device().str() : std::string(), ", the model on ", o.device);
  MICROLLM_CHECK(comm_ || !o.data_parallel.zero1, "train",
                 "ZeRO-1 needs data parallelism (a communicator)");
  MICROLLM_CHECK(o.optimizer_kernels == "auto" || o.optimizer_kernels == "fused" ||
                     o.optimizer_kernels == "reference",
                 "train", "optimizer kernels must be auto, fused or reference, found '",
                 o.optimizer_kernels, "'");
  MICROLLM_CHECK(
      o.optimizer_kernels != "fused" || (o.optimizer == "adamw" && !o.data_parallel.zero1), "train",
      "fused optimizer kernels exist for AdamW without ZeRO-1, found optimizer ", o.optimizer,
      o.data_parallel.zero1 ? " with ZeRO-1" : "");
  fused_optimizer_ =
      o.optimizer_kernels == "fused" || (o.optimizer_kernels == "auto" && o.optimizer == "adamw" &&
                                         !o.data_parallel.zero1 && o.device.is_cuda());
  // The parameters are views of one flat buffer (the values Transformer(config, ..., seed)
  // draws); the optimizer lays its master weights, state and gradients out the same way.
  const model::ModelWeights weights =
      model::ModelWeights::random(config, o.device, o.dtype, o.seed);
  model_ = std::make_unique<model::Transformer>(model::Transformer::from_weights(weights));
  model_->set_requires_grad(true);
  model_->set_attention_backend(o.attention);
  model_->set_recompute(o.recompute);
  if (comm_) {
    // Registration order (Hugging Face order): buckets are formed from its reverse.
    NamedTensors params;
    for (const model::ParameterSpec& spec : model::parameter_specs(config))
      params.emplace_back(spec.name, model_->parameters().at(spec.name));
    dp_ = std::make_unique<DataParallel>(comm_, std::move(params), o.data_parallel);
    dp_->broadcast_parameters();
  }
  if (o.data_parallel.zero1 && dp_) {
    auto zero = std::make_unique<ZeroOptimizer>(*dp_, o.optimizer, o.adamw, o.sgd);
    zero_ = zero.get();
    optimizer_ = std::move(zero);
  } else {
    AdamWOptions adamw = o.adamw;
    adamw.fused = fused_optimizer_;
    optimizer_ = make_optimizer(o.optimizer, optimizer_params(model_->parameters()), adamw, o.sgd,
                                weights.flat());
  }
  // Masters were copied before the broadcast; start them from rank 0's values.
  if (dp_) reset_masters_from_parameters();
}

Trainer::~Trainer() = default;

void Trainer::reset_masters_from_parameters() {
  if (zero_) {
    zero_->load_masters_from_parameters();
    return;
  }
  std::map<std::string, Tensor> state;
  for (const auto& [name, p] : model_->parameters())
    state["master." + name] = p.detach().to(DType::F32);
  for (const auto& [name, t] : optimizer_->state())
    if (!state.count(name)) state[name] = t;
  optimizer_->load_state(state, optimizer_->steps_taken());
}

void Trainer::init_from(const std::string& dir) {
  const io::SafetensorsCheckpoint checkpoint = io::open_checkpoint(dir);
  {
    autograd::NoGradGuard no_grad;
    io::load_into(model_->parameters(), checkpoint, /*strict=*/true);
  }
  // The optimizer's master weights start from the loaded parameters (every rank loads the
  // same files, so data-parallel ranks agree without a broadcast).
  reset_masters_from_parameters();
}

void Trainer::zero_grad() {
  for (const auto& [name, p] : model_->parameters()) {
    Tensor t = p;  // (shape of p): a handle to the same parameter
    t.zero_grad();
  }
  if (!zero_) optimizer_->zero_grad();  // ZeRO-1 keeps its shard gradients attached
}

Tensor Trainer::mean_loss(const Tensor& inputs, const Tensor& targets) const {
  const int64_t rows = inputs.size(0) * inputs.size(1);
  // The loss is F32 whatever the compute dtype (the kernel accumulates in F32 anyway).
  if (options_.loss_chunk > 0) {
    const Tensor h = model_->hidden(inputs);  // (B, T, C)
    return ops::linear_cross_entropy(h.reshape({rows, -1}), model_->lm_head_weight(),
                                     targets.reshape({-1}), -100, DType::F32,
                                     options_.loss_chunk);  // ()
  }
  if (!switch_off("MICROLLM_FUSED_LOSS")) {
    // The logits' gradient written in the forward, over the logits (one (N, V) tensor);
    // MICROLLM_FUSED_LOSS=0 takes the whole logits and cross_entropy's own backward.
    const Tensor h = model_->hidden(inputs);  // (B, T, C)
    return ops::lm_head_cross_entropy(h.reshape({rows, -1}), model_->lm_head_weight(),
                                      targets.reshape({-1}), -100, DType::F32);  // ()
  }
  const Tensor logits = model_->forward(inputs);  // (B, T, V)
  return ops::cross_entropy(logits.reshape({rows, -1}), targets.reshape({-1}), -100,
                            DType::F32);  // ()
}

StepStats Trainer::train_step(const TokenFile& data) {
  const TrainOptions& o = options_;
  const auto start = std::chrono::steady_clock::now();
  const int64_t step = step_ + 1;
  const double lr = warmup_cosine_lr(step, o.warmup, o.steps, o.lr, o.lr * o.min_lr_ratio);
  timer_.start();
  zero_grad();
  Tensor loss_sum;  // () F32: the micro-batch losses summed
  for (int64_t micro = 0; micro < o.grad_accum; ++micro) {
    // Gradients are averaged over the ranks on the last micro-batch only.
    if (dp_) dp_->prepare_backward(micro + 1 == o.grad_accum);
    const int64_t first = first_window(step_, micro, o.grad_accum, o.batch, rank(), world_size());
    const Tensor windows =
        sample_windows(data.tokens, o.seq, o.seed, first, o.batch, o.device);  // (B, T+1)
    const Tensor inputs = windows.narrow(1, 0, o.seq).contiguous();            // (B, T)
    const Tensor targets = windows.narrow(1, 1, o.seq).contiguous();           // (B, T)
    const Tensor loss = mean_loss(inputs, targets);                            // ()
    timer_.mark(Stage::Forward);
    // Each micro-batch contributes 1/k of the mean, so k micro-batches equal one k× batch.
    ops::scale(loss, 1.0 / static_cast<double>(o.grad_accum)).backward();
    timer_.mark(Stage::Backward);
    const Tensor detached = loss.detach().to(DType::F32);  // ()
    loss_sum = loss_sum.defined() ? ops::add(loss_sum, detached) : detached;
  }
  if (dp_) {
    dp_->finish_gradient_sync();
    // The logged loss is the global batch's: the mean of the ranks' means.
    loss_sum = loss_sum.clone();
    comm_->all_reduce(loss_sum, ReduceOp::Avg);
    timer_.mark(Stage::CommWait);
  }
  StepStats stats;
  if (zero_) {
    stats.grad_norm = zero_->clip_grad_norm(o.grad_clip);
    zero_->update(lr);
    timer_.mark(Stage::Optimizer);
    zero_->gather_parameters();
    timer_.mark(Stage::CommWait);
  } else if (fused_optimizer_) {
    // The clip's scale goes into the update kernel instead of rewriting the gradients.
    stats.grad_norm = optimizer_->gradient_norm();
    optimizer_->set_grad_scale(clip_scale(stats.grad_norm, o.grad_clip));
    optimizer_->step(lr);
    timer_.mark(Stage::Optimizer);
  } else {
    stats.grad_norm = clip_grad_norm(model_->parameters(), o.grad_clip);
    optimizer_->step(lr);
    timer_.mark(Stage::Optimizer);
  }
  zero_grad();
  step_ = step;
  stats.step = step;
  stats.lr = lr;
  stats.loss = loss_sum.item() / static_cast<double>(o.grad_accum);  // one device read per step
  stats.tokens = o.batch * o.seq * o.grad_accum * world_size();
  stats.stages = timer_.finish();
  stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return stats;
}

double Trainer::evaluate(const TokenFile& data, int64_t batches) {
  autograd::NoGradGuard no_grad;
  const TrainOptions& o = options_;
  double total = 0;
  for (int64_t b = 0; b < batches; ++b) {
    // Evaluation windows come from their own stream, the same on every call.
    // (B, T+1)
    const Tensor windows =
        sample_windows(data.tokens, o.seq, o.seed ^ 0x5eed5eedull, b * o.batch, o.batch, o.device);
    total += mean_loss(windows.narrow(1, 0, o.seq).contiguous(),
                       windows.narrow(1, 1, o.seq).contiguous())
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
  return {{"steps", o.steps},
          {"batch", o.batch},
          {"seq", o.seq},
          {"grad_accum", o.grad_accum},
          {"lr", o.lr},
          {"min_lr_ratio", o.min_lr_ratio},
          {"warmup", o.warmup},
          {"optimizer", o.optimizer},
          {"grad_clip", o.grad_clip},
          {"seed", o.seed},
          {"device", o.device.str()},
          {"dtype", dtype_name(o.dtype)},
          {"adamw",
           {{"beta1", o.adamw.beta1},
            {"beta2", o.adamw.beta2},
            {"eps", o.adamw.eps},
            {"weight_decay", o.adamw.weight_decay}}},
          {"sgd", {{"momentum", o.sgd.momentum}, {"weight_decay", o.sgd.weight_decay}}}};
}

}  // namespace

void Trainer::save_checkpoint(const std::string& dir) const {
  // ZeRO-1: state() gathers the shards (every rank takes part); plain: each rank's is whole.
  const NamedTensors optimizer_state = optimizer_->state();
  if (rank() == 0) {
    const fs::path final_dir = fs::path(dir) / "checkpoint";
    const fs::path tmp = fs::path(dir) / "checkpoint.tmp";
    const fs::path old = fs::path(dir) / "checkpoint.old";
    fs::remove_all(tmp);
    fs::create_directories(tmp);
    io::NamedTensors state;
    for (const auto& [name, t] : optimizer_state) state.emplace_back(name, t);
    io::save_safetensors((tmp / "optimizer.safetensors").string(), state);
    nlohmann::json options = options_json(options_);
    options["world_size"] = world_size();
    const nlohmann::json trainer_state = {
        {"format", "microllm-checkpoint-v1"},
        {"step", step_},
        {"optimizer_steps", optimizer_->steps_taken()},
        // Global windows consumed so far; the sampler's generator state is (seed, this count).
        {"data_windows", step_ * options_.grad_accum * options_.batch * world_size()},
        {"options", options}};
    write_text(tmp / "trainer_state.json", trainer_state.dump(2) + "\n");
    write_text(tmp / "config.json", model_->config().to_json().dump(2) + "\n");
    // Swap in the new checkpoint; the previous one survives until the new one is in place.
    fs::remove_all(old);
    if (fs::exists(final_dir)) fs::rename(final_dir, old);
    fs::rename(tmp, final_dir);
    fs::remove_all(old);
  }
  if (comm_) comm_->barrier();  // no rank runs ahead (or resumes) before the files exist
}

void Trainer::resume(const std::string& dir) {
  const fs::path cdir = fs::path(dir) / "checkpoint";
  std::ifstream in(cdir / "trainer_state.json");
  MICROLLM_CHECK(in.good(), "resume", "no checkpoint in ", dir, " (expected ",
                 (cdir / "trainer_state.json").string(), ")");
  const nlohmann::json s = nlohmann::json::parse(in);
  MICROLLM_CHECK(s.value("format", "") == "microllm-checkpoint-v1", "resume",
                 (cdir / "trainer_state.json").string(), ": unknown format ",
                 s.value("format", "(none)"));
  const nlohmann::json& saved = s.at("options");
  // The run's shape must match: these decide the data windows and the update.
  for (const char* key : {"seq", "seed", "optimizer", "dtype"})
    MICROLLM_CHECK(saved.at(key) == options_json(options_).at(key), "resume",
                   "checkpoint was made with ", key, " = ", saved.at(key).dump(), ", this run has ",
                   options_json(options_).at(key).dump());
  // Windows per step may be split differently over ranks and micro-batches: a step takes
  // the same global windows whenever batch × grad_accum × world size is the same.
  const int64_t saved_world = saved.value("world_size", int64_t{1});
  const int64_t saved_batch = saved.at("batch").get<int64_t>(),
                saved_accum = saved.at("grad_accum").get<int64_t>();
  const int64_t saved_windows = saved_batch * saved_accum * saved_world;
  const int64_t windows = options_.batch * options_.grad_accum * world_size();
  MICROLLM_CHECK(saved_windows == windows, "resume", "checkpoint was made with ", saved_windows,
                 " windows per step (batch ", saved_batch, " × grad_accum ", saved_accum,
                 " × world size ", saved_world, "), this run has ", windows, " (batch ",
                 options_.batch, " × grad_accum ", options_.grad_accum, " × world size ",
                 world_size(), ")");
  const model::ModelConfig saved_config = model::ModelConfig::load((cdir / "config.json").string());
  MICROLLM_CHECK(saved_config.to_json() == model_->config().to_json(), "resume",
                 "checkpoint config differs from this run's config");
  const io::SafetensorsFile file =
      io::SafetensorsFile::open((cdir / "optimizer.safetensors").string());
  std::map<std::string, Tensor> tensors;
  for (const std::string& name : file.names()) tensors[name] = file.tensor(name);
  optimizer_->load_state(tensors, s.at("optimizer_steps").get<int64_t>());
  step_ = s.at("step").get<int64_t>();
}

void Trainer::save_model(const std::string& dir) const {
  if (rank() == 0) {  // parameters are identical on every rank
    fs::create_directories(dir);
    io::NamedTensors named;
    for (const auto& [name, p] : model_->parameters()) named.emplace_back(name, p.detach());
    io::save_safetensors((fs::path(dir) / "model.safetensors").string(), named, {{"format", "pt"}});
    // torch_dtype names the dtype the weights are saved in (transformers' "auto" loads them so).
    nlohmann::json config = model_->config().to_json();
    config["torch_dtype"] = options_.dtype == DType::BF16 ? "bfloat16" : "float32";
    write_text(fs::path(dir) / "config.json", config.dump(2) + "\n");
  }
  if (comm_) comm_->barrier();
}

}  // namespace microllm::train
