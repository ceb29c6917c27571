// Data-parallel gradient synchronization, as PyTorch DDP does it: gradients are copied into
// buckets (see buckets.h) and each bucket is averaged over the ranks as soon as all of its
// parameters' gradients are final — from a post-accumulate-grad hook on every parameter,
// while backward is still computing the gradients of earlier layers.
//
// Per optimizer step (k micro-batches):
//   prepare_backward(sync = micro == k−1)   hooks act only on the last micro-batch, so the
//   forward / backward                      first k−1 accumulate locally (no communication)
//   finish_gradient_sync()                  starts what is left, waits for every bucket
//
// Buckets start strictly in bucket order (bucket b only after 0..b−1), so every rank issues
// the same collectives in the same order even if hooks fire in a different order. With
// overlap off, nothing starts during backward and finish_gradient_sync() starts all of them;
// the reductions are the same, so the results are bitwise the same.
//
// After finish_gradient_sync():
//   plain    every parameter's .grad is a view into its bucket holding the average over
//            ranks (gradients as bucket views: no copy back)
//   ZeRO-1   parameters' .grad are dropped; grad_shard(b) holds this rank's averaged shard
//            of bucket b (a reduce-scatter instead of an all-reduce), for ZeroOptimizer
//
// A parameter whose gradient is undefined when its bucket starts contributes zeros.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "microllm/train/distributed/buckets.h"
#include "microllm/train/distributed/communicator.h"
#include "microllm/train/optimizer.h"

namespace microllm::train {

struct DataParallelOptions {
  double bucket_mb = 25.0;  // bucket capacity in MiB (PyTorch DDP's bucket_cap_mb default)
  bool overlap = true;      // reduce buckets during backward (false: all after backward)
  bool zero1 = false;       // shard optimizer state and F32 masters across ranks (ZeroOptimizer)
};

class DataParallel {
 public:
  // `params` in registration order (model::parameter_specs), leaves that require a gradient,
  // on the communicator's device. Registers the hooks (overlap on); the destructor removes them.
  DataParallel(std::shared_ptr<Communicator> comm, NamedTensors params,
               DataParallelOptions options);
  ~DataParallel();
  DataParallel(const DataParallel&) = delete;
  DataParallel& operator=(const DataParallel&) = delete;

  Communicator& comm() const { return *comm_; }
  const DataParallelOptions& options() const { return options_; }
  const NamedTensors& params() const { return params_; }
  const std::vector<GradBucket>& buckets() const { return buckets_; }
  // ZeRO-1: this rank's averaged shard of bucket b, (S) in the bucket's dtype.
  const Tensor& grad_shard(size_t bucket) const { return grad_shards_.at(bucket); }

  // Copies rank 0's parameter values to every rank (identical initialization).
  void broadcast_parameters();
  // Before each micro-batch's backward; `sync` on the last one of the step.
  void prepare_backward(bool sync);
  // After the last micro-batch's backward (see the file comment).
  void finish_gradient_sync();
  // Buckets started from hooks during the last synchronized backward (tests, logs).
  int64_t buckets_started_in_backward() const { return started_in_backward_; }

 private:
  void on_grad_ready(size_t param);
  void start_ready_buckets();
  void start_bucket(size_t b);

  std::shared_ptr<Communicator> comm_;
  NamedTensors params_;
  DataParallelOptions options_;
  std::vector<GradBucket> buckets_;
  std::vector<size_t> bucket_of_;    // per parameter
  std::vector<Tensor> buffers_;      // per bucket: (padded_numel), bucket dtype
  std::vector<Tensor> grad_shards_;  // per bucket, ZeRO-1: (padded_numel / W)
  std::vector<int64_t> hook_ids_;    // per parameter (overlap on)
  std::vector<int64_t> pending_;     // per bucket: parameters whose gradient is not final yet
  std::vector<std::unique_ptr<Work>> works_;
  size_t next_bucket_ = 0;  // buckets [0, next_bucket_) have started
  bool sync_ = false;
  bool in_finish_ = false;
  int64_t started_in_backward_ = 0;
};

// ZeRO-1 (Rajbhandari et al. 2020, stage 1): each rank keeps the optimizer state and F32
// master weights of its shards only (1/W of them) and updates those elements; the updated
// parameters are then all-gathered bucket by bucket. The inner optimizer (AdamW or SGD)
// runs over one flat slice per shard segment, with the weight-decay flag of the parameter
// it came from, so each element sees exactly the update the unsharded optimizer computes.
//
// state() and load_state() speak the unsharded layout ("master.NAME", "exp_avg.NAME", ...
// full tensors), so checkpoints match the single-process ones and resume at any world size;
// state() gathers (a collective: every rank must call it).
class ZeroOptimizer final : public Optimizer {
 public:
  ZeroOptimizer(DataParallel& dp, const std::string& kind, const AdamWOptions& adamw,
                const SgdOptions& sgd);

  // update(lr) then gather_parameters().
  void step(double lr) override;
  // Updates this rank's shards from the averaged gradient shards.
  void update(double lr);
  // All-gathers the updated parameters bucket by bucket into every rank's parameters.
  void gather_parameters();
  // Global-norm clipping over the gradient shards (one scalar all-reduce); returns the norm.
  double clip_grad_norm(double max_norm);
  // Resets this rank's master shards from the current parameter values.
  void load_masters_from_parameters();

  NamedTensors state() const override;
  void load_state(const std::map<std::string, Tensor>& tensors, int64_t steps) override;
  std::vector<std::string> state_prefixes() const override { return inner_->state_prefixes(); }

 private:
  struct Segment {
    size_t bucket;
    ShardSegment shard;
    Tensor param_slice;  // (numel) view into the parameter's storage
    std::string name;    // "PARAM[begin:end]", the inner optimizer's slot name
  };
  DataParallel& dp_;
  std::vector<Segment> segments_;
  std::unique_ptr<Optimizer> inner_;
  std::vector<Tensor> send_;    // per bucket: (S) parameters of this rank's shard
  std::vector<Tensor> gather_;  // per bucket: (padded_numel) every rank's parameters
};

}  // namespace microllm::train
