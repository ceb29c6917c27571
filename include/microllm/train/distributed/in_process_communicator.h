// N ranks as threads of one process: the collectives the NCCL communicator runs across GPUs,
// computed on the host side of one shared rendezvous object. Used by the tests to run
// data-parallel training with several ranks without GPUs.
//
// Determinism: a reduction sums the ranks' tensors in rank order (0, 1, …, W−1) in F32 and,
// for Avg, multiplies by 1/W; one thread computes it and every rank receives the same
// bytes. So results are bitwise identical on every rank, and bitwise reproducible.
//
// Every rank's thread calls the same collectives in the same order (as with NCCL). The
// group checks that the calls match (op, dtype, size, root) and throws on every rank when
// they do not. A rank that waits longer than the group's timeout for the others, or a call
// to abort(), makes every waiting rank throw instead of hanging.
#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "microllm/train/distributed/communicator.h"

namespace microllm::train {

class InProcessGroup : public std::enable_shared_from_this<InProcessGroup> {
 public:
  // One collective as a rank hands it to the group.
  struct Call {
    std::string op;  // "all_reduce", "reduce_scatter", "all_gather", "broadcast", "barrier"
    Tensor input, output;
    ReduceOp reduce = ReduceOp::Sum;
    int root = 0;
  };

  static std::shared_ptr<InProcessGroup> create(int world_size, Device device = Device::cpu(),
                                                double timeout_seconds = 120.0);
  int world_size() const { return world_size_; }
  Device device() const { return device_; }

  // Runs `call` for `rank` once all ranks have arrived; returns when it has completed.
  void run(int rank, const Call& call);
  // Wakes every waiting rank with an Error carrying `why`; later calls throw too.
  void abort(const std::string& why);

 private:
  InProcessGroup(int world_size, Device device, double timeout_seconds);
  void execute();  // the last rank to arrive runs the collective for all (lock held)

  int world_size_;
  Device device_;
  double timeout_seconds_;
  std::mutex mutex_;
  std::condition_variable arrived_cv_;
  std::vector<const Call*> calls_;  // one per rank while a collective gathers
  int arrived_ = 0;
  uint64_t generation_ = 0;         // completed collectives
  uint64_t failed_generation_ = 0;  // generation + 1 of the last collective that threw
  std::string failure_;
  std::string aborted_;
};

class InProcessCommunicator final : public Communicator {
 public:
  InProcessCommunicator(std::shared_ptr<InProcessGroup> group, int rank);
  // One communicator per rank of a new group.
  static std::vector<std::shared_ptr<InProcessCommunicator>> create_group(
      int world_size, Device device = Device::cpu(), double timeout_seconds = 120.0);

  int rank() const override { return rank_; }
  int world_size() const override { return group_->world_size(); }
  Device device() const override { return group_->device(); }
  std::string backend_name() const override { return "in-process"; }
  InProcessGroup& group() { return *group_; }

  void all_reduce(Tensor t, ReduceOp op) override;
  void reduce_scatter(const Tensor& input, Tensor output, ReduceOp op) override;
  void all_gather(const Tensor& input, Tensor output) override;
  void broadcast(Tensor t, int root) override;
  void barrier() override;
  // Run at once (the host computes them); the returned Work is already complete.
  std::unique_ptr<Work> all_reduce_async(Tensor t, ReduceOp op) override;
  std::unique_ptr<Work> reduce_scatter_async(const Tensor& input, Tensor output,
                                             ReduceOp op) override;

 private:
  std::shared_ptr<InProcessGroup> group_;
  int rank_;
};

}  // namespace microllm::train
