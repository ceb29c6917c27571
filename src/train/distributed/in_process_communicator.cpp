// Ranks as threads sharing one InProcessGroup (see in_process_communicator.h). The last rank
// to arrive at a collective runs it for all of them while the others wait on a condition
// variable; reductions add the ranks' tensors in rank order in F32.
#include "microllm/train/distributed/in_process_communicator.h"

#include <chrono>

#include "microllm/autograd/node.h"
#include "microllm/ops/elementwise.h"

namespace microllm::train {
namespace {

class CompletedWork final : public Work {
 public:
  void wait() override {}
};

// Σ over calls of input (flattened, F32) in rank order; ×1/W for Avg.
Tensor reduce_in_rank_order(const std::vector<const InProcessGroup::Call*>& calls, ReduceOp op) {
  Tensor acc = calls[0]->input.view({-1}).to(DType::F32);  // (n)
  for (size_t r = 1; r < calls.size(); ++r)
    acc = ops::add(acc, calls[r]->input.view({-1}).to(DType::F32));
  if (op == ReduceOp::Avg && calls.size() > 1)
    acc = ops::scale(acc, 1.0 / static_cast<double>(calls.size()));
  return acc;
}

}  // namespace

std::shared_ptr<InProcessGroup> InProcessGroup::create(int world_size, Device device,
                                                       double timeout_seconds) {
  MICROLLM_CHECK(world_size >= 1, "in-process group", "world size must be ≥ 1, found ", world_size);
  MICROLLM_CHECK(timeout_seconds > 0, "in-process group", "timeout must be positive, found ",
                 timeout_seconds);
  return std::shared_ptr<InProcessGroup>(new InProcessGroup(world_size, device, timeout_seconds));
}

InProcessGroup::InProcessGroup(int world_size, Device device, double timeout_seconds)
    : world_size_(world_size),
      device_(device),
      timeout_seconds_(timeout_seconds),
      calls_(static_cast<size_t>(world_size), nullptr) {}

void InProcessGroup::abort(const std::string& why) {
  std::lock_guard lock(mutex_);
  if (aborted_.empty()) aborted_ = why;
  arrived_cv_.notify_all();
}

void InProcessGroup::run(int rank, const Call& call) {
  std::unique_lock lock(mutex_);
  MICROLLM_CHECK(rank >= 0 && rank < world_size_, call.op, "rank ", rank,
                 " is outside the group of ", world_size_);
  MICROLLM_CHECK(aborted_.empty(), call.op, "rank ", rank, ": the group was aborted: ", aborted_);
  MICROLLM_CHECK(calls_[static_cast<size_t>(rank)] == nullptr, call.op, "rank ", rank,
                 " is already inside a collective (two threads with one rank?)");
  calls_[static_cast<size_t>(rank)] = &call;
  const uint64_t generation = generation_;
  if (++arrived_ == world_size_) {
    std::string error;
    try {
      execute();
    } catch (const std::exception& e) {
      error = e.what();
    }
    std::fill(calls_.begin(), calls_.end(), nullptr);
    arrived_ = 0;
    ++generation_;
    if (!error.empty()) {
      failure_ = error;
      failed_generation_ = generation_;
    }
    arrived_cv_.notify_all();
  } else {
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_seconds_);
    while (generation_ == generation && aborted_.empty()) {
      if (arrived_cv_.wait_until(lock, deadline) == std::cv_status::timeout &&
          generation_ == generation && aborted_.empty()) {
        std::string missing;
        for (int r = 0; r < world_size_; ++r)
          if (!calls_[static_cast<size_t>(r)])
            missing += (missing.empty() ? "" : ", ") + std::to_string(r);
        aborted_ = "rank " + std::to_string(rank) + " waited " + std::to_string(timeout_seconds_) +
                   " s in " + call.op + " for rank(s) " + missing;
        arrived_cv_.notify_all();
      }
    }
    if (generation_ == generation) {  // aborted while waiting: leave the collective
      calls_[static_cast<size_t>(rank)] = nullptr;
      --arrived_;
      MICROLLM_FAIL(call.op, "rank ", rank, ": the group was aborted: ", aborted_);
    }
  }
  if (failed_generation_ == generation + 1) throw Error("", failure_);
}

void InProcessGroup::execute() {
  autograd::NoGradGuard no_grad;
  const Call& first = *calls_[0];
  for (int r = 1; r < world_size_; ++r) {
    const Call& c = *calls_[static_cast<size_t>(r)];
    MICROLLM_CHECK(c.op == first.op, first.op, "rank ", r, " called ", c.op,
                   " while rank 0 called ", first.op);
  }
  const std::string& op = first.op;
  if (op == "barrier") return;
  for (int r = 1; r < world_size_; ++r) {
    const Call& c = *calls_[static_cast<size_t>(r)];
    MICROLLM_CHECK(c.input.dtype() == first.input.dtype() && c.input.numel() == first.input.numel(),
                   c.op, "rank ", r, " passed ", c.input.describe(), ", rank 0 ",
                   first.input.describe());
    MICROLLM_CHECK(c.reduce == first.reduce && c.root == first.root, c.op, "rank ", r,
                   " asked for ", reduce_op_name(c.reduce), " with root ", c.root, ", rank 0 for ",
                   reduce_op_name(first.reduce), " with root ", first.root);
  }
  if (op == "broadcast") {
    MICROLLM_CHECK(first.root >= 0 && first.root < world_size_, op, "root ", first.root,
                   " is outside the group of ", world_size_);
    const Tensor src = calls_[static_cast<size_t>(first.root)]->input;  // (any shape, n elements)
    for (int r = 0; r < world_size_; ++r) {
      if (r == first.root) continue;
      Tensor dst = calls_[static_cast<size_t>(r)]->input;  // (shape of src)
      dst.copy_from(src);
    }
    return;
  }
  if (op == "all_gather") {
    const int64_t n = first.input.numel();
    for (const Call* dst : calls_) {
      const Tensor out = dst->output.view({-1});  // (W·n)
      for (int q = 0; q < world_size_; ++q)
        out.narrow(0, q * n, n).copy_from(calls_[static_cast<size_t>(q)]->input.view({-1}));
    }
    return;
  }
  const Tensor acc = reduce_in_rank_order(calls_, first.reduce);  // (n) or (W·n) F32
  if (op == "all_reduce") {
    for (const Call* c : calls_) c->input.view({-1}).copy_from(acc);
  } else if (op == "reduce_scatter") {
    const int64_t n = first.output.numel();
    for (int r = 0; r < world_size_; ++r)
      calls_[static_cast<size_t>(r)]->output.view({-1}).copy_from(acc.narrow(0, r * n, n));
  } else {
    MICROLLM_FAIL("in-process group", "unknown collective '", op, "'");
  }
}

InProcessCommunicator::InProcessCommunicator(std::shared_ptr<InProcessGroup> group, int rank)
    : group_(std::move(group)), rank_(rank) {
  MICROLLM_CHECK(group_ != nullptr, "in-process communicator", "no group");
  MICROLLM_CHECK(rank >= 0 && rank < group_->world_size(), "in-process communicator", "rank ", rank,
                 " is outside the group of ", group_->world_size());
}

std::vector<std::shared_ptr<InProcessCommunicator>> InProcessCommunicator::create_group(
    int world_size, Device device, double timeout_seconds) {
  const std::shared_ptr<InProcessGroup> group =
      InProcessGroup::create(world_size, device, timeout_seconds);
  std::vector<std::shared_ptr<InProcessCommunicator>> out;
  for (int r = 0; r < world_size; ++r)
    out.push_back(std::make_shared<InProcessCommunicator>(group, r));
  return out;
}

void InProcessCommunicator::all_reduce(Tensor t, ReduceOp op) {
  check_collective(*this, "all_reduce", CollectiveShape::InPlace, t);
  group_->run(rank_, {"all_reduce", t, Tensor(), op, 0});
}

void InProcessCommunicator::reduce_scatter(const Tensor& input, Tensor output, ReduceOp op) {
  check_collective(*this, "reduce_scatter", CollectiveShape::Scatter, input, output);
  group_->run(rank_, {"reduce_scatter", input, output, op, 0});
}

void InProcessCommunicator::all_gather(const Tensor& input, Tensor output) {
  check_collective(*this, "all_gather", CollectiveShape::Gather, input, output);
  group_->run(rank_, {"all_gather", input, output, ReduceOp::Sum, 0});
}

void InProcessCommunicator::broadcast(Tensor t, int root) {
  check_collective(*this, "broadcast", CollectiveShape::InPlace, t);
  group_->run(rank_, {"broadcast", t, Tensor(), ReduceOp::Sum, root});
}

void InProcessCommunicator::barrier() {
  group_->run(rank_, {"barrier", Tensor(), Tensor(), ReduceOp::Sum, 0});
}

std::unique_ptr<Work> InProcessCommunicator::all_reduce_async(Tensor t, ReduceOp op) {
  all_reduce(std::move(t), op);
  return std::make_unique<CompletedWork>();
}

std::unique_ptr<Work> InProcessCommunicator::reduce_scatter_async(const Tensor& input,
                                                                  Tensor output, ReduceOp op) {
  reduce_scatter(input, std::move(output), op);
  return std::make_unique<CompletedWork>();
}

}  // namespace microllm::train
