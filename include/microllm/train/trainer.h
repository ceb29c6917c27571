// The training loop: next-token cross-entropy on windows drawn from a token file, gradient
// accumulation, global-norm clipping, warmup + cosine schedule, AdamW or SGD with F32
// master weights (BF16 mixed precision when the model is BF16), evaluation (loss and
// perplexity), and checkpoints that resume bit for bit on the same device.
//
// Data order: window i of a run starts at a position drawn from the counter-based
// generator at (seed, i) — so the data position is just the number of windows consumed,
// and a resumed run draws exactly the windows the uninterrupted run would have.
//
// Data parallel (a Communicator of W ranks; docs/distributed.md): every rank runs this loop
// on its own micro-batches of `batch` windows — global windows numbered as in a single run
// whose micro-batch is W·batch (see first_window) — and gradients are averaged over the
// ranks, so W ranks × batch B take the same optimizer steps as 1 rank × batch W·B.
#pragma once

#include <memory>
#include <string>

#include "microllm/model/transformer.h"
#include "microllm/train/distributed/data_parallel.h"
#include "microllm/train/optimizer.h"
#include "microllm/train/stage_timer.h"
#include "microllm/train/token_file.h"

namespace microllm::train {

struct TrainOptions {
  int64_t steps = 100;              // total optimizer steps of the run
  int64_t batch = 8;                // sequences per micro-batch (B)
  int64_t seq = 128;                // tokens per sequence (T)
  int64_t grad_accum = 1;           // micro-batches per optimizer step
  double lr = 3e-4;                 // peak learning rate
  double min_lr_ratio = 0.1;        // cosine floor as a fraction of lr
  int64_t warmup = 0;               // linear warmup steps
  std::string optimizer = "adamw";  // adamw | sgd
  AdamWOptions adamw;
  SgdOptions sgd;
  double grad_clip = 1.0;  // global L2 norm; ≤ 0 disables
  uint64_t seed = 0;       // parameters and data order
  Device device = Device::cpu();
  DType dtype = DType::F32;  // model compute dtype (F32 or BF16)
  // Rows of the LM head + loss per chunk (ops::linear_cross_entropy): at most
  // (loss_chunk, V) logits exist at once. 0: the whole (B·T, V) logits (the reference path).
  int64_t loss_chunk = 0;
  // The attention kernel (Auto: flash on CUDA in BF16 for head dims 64 and 128; Reference:
  // the materialized kernel everywhere).
  ops::AttentionBackend attention = ops::AttentionBackend::Auto;
  // Activation recomputation per layer (Transformer::set_recompute): a layer's activations
  // are freed after its forward and recomputed in backward; same gradients, less memory,
  // one more forward per step.
  bool recompute = false;
  // The optimizer's kernels: "fused" (AdamW as multi-tensor kernels, ops::adamw_step, and
  // the gradient norm by ops::sum_of_squares), "reference" (elementwise operators), or
  // "auto" (fused for AdamW on CUDA without ZeRO-1, else reference).
  std::string optimizer_kernels = "auto";
  DataParallelOptions data_parallel;  // used when the trainer gets a communicator
};

struct StepStats {
  int64_t step = 0;
  double loss = 0;  // mean over the micro-batches
  double lr = 0;
  double grad_norm = 0;  // before clipping
  double seconds = 0;    // wall time of the step, device work included
  int64_t tokens = 0;    // tokens processed, over all ranks
  // This rank's time per stage (device time on CUDA): forward, backward, waiting for the
  // gradient collectives after backward (and the ZeRO-1 parameter all-gather), optimizer
  // (clipping included).
  StageSeconds stages;
};

// Global index of the first window that `rank` of `world_size` draws for micro-batch
// `micro` of the step that follows `steps_done` steps: ((steps_done·k + micro)·W + rank)·B.
// Micro-batch m of a step covers global windows [(s·k + m)·W·B, (s·k + m + 1)·W·B), rank r
// the r-th run of B of them — exactly the windows micro-batch m of a one-rank run with
// batch W·B draws. With W = 1 it is the single-process numbering.
int64_t first_window(int64_t steps_done, int64_t micro, int64_t grad_accum, int64_t batch, int rank,
                     int world_size);

// Draws `count` windows of seq + 1 tokens, windows first_window .. first_window+count−1 of
// the run with `seed`: (count, seq + 1) I64 on `device`.
Tensor sample_windows(const Tensor& tokens, int64_t seq, uint64_t seed, int64_t first_window,
                      int64_t count, Device device);

class Trainer {
 public:
  // Without `comm` (or before any data parallelism): one process. With `comm`: one rank of
  // data-parallel training; rank 0's initial parameters are broadcast to every rank.
  Trainer(const model::ModelConfig& config, TrainOptions options,
          std::shared_ptr<Communicator> comm = nullptr);
  ~Trainer();

  model::Transformer& model() { return *model_; }
  // Flat over the model's parameter buffer (Optimizer::flat) except under ZeRO-1.
  const Optimizer& optimizer() const { return *optimizer_; }
  const TrainOptions& options() const { return options_; }
  int64_t step() const { return step_; }
  int rank() const { return comm_ ? comm_->rank() : 0; }
  int world_size() const { return comm_ ? comm_->world_size() : 1; }
  Communicator* communicator() const { return comm_.get(); }
  DataParallel* data_parallel() const { return dp_.get(); }

  // Loads weights from a Hugging Face folder (config must match; strict).
  void init_from(const std::string& dir);
  // Restores model, optimizer, step and data position from DIR/checkpoint.
  void resume(const std::string& dir);

  StepStats train_step(const TokenFile& data);
  // Mean next-token loss over `batches` fixed windows (the same windows every call).
  double evaluate(const TokenFile& data, int64_t batches);

  // DIR/checkpoint/{optimizer.safetensors, trainer_state.json, config.json}, replaced
  // atomically (written beside it, then renamed). Data parallel: a collective — ZeRO-1
  // gathers the optimizer state, rank 0 writes the single-process layout, all wait for it.
  void save_checkpoint(const std::string& dir) const;
  // DIR/model.safetensors (Hugging Face names, the model's dtype) and DIR/config.json.
  // Data parallel: rank 0 writes, every rank waits for it.
  void save_model(const std::string& dir) const;

 private:
  void zero_grad();
  void reset_masters_from_parameters();
  // Mean next-token loss () F32 of inputs (B, T) against targets (B, T): the whole logits,
  // or chunked when options_.loss_chunk > 0.
  Tensor mean_loss(const Tensor& inputs, const Tensor& targets) const;

  TrainOptions options_;
  std::shared_ptr<Communicator> comm_;
  std::unique_ptr<model::Transformer> model_;
  std::unique_ptr<DataParallel> dp_;  // after model_: destroyed first, removing its hooks
  std::unique_ptr<Optimizer> optimizer_;
  ZeroOptimizer* zero_ = nullptr;  // optimizer_ when ZeRO-1 is on
  bool fused_optimizer_ = false;   // options_.optimizer_kernels resolved
  StageTimer timer_;
  int64_t step_ = 0;
};

}  // namespace microllm::train
