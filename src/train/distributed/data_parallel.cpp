// Bucketed gradient averaging overlapped with backward, and the ZeRO-1 optimizer (see
// data_parallel.h).
#include "microllm/train/distributed/data_parallel.h"

#include <algorithm>
#include <cmath>

#include "microllm/autograd/node.h"
#include "microllm/ops/elementwise.h"
#include "microllm/ops/reduce.h"

namespace microllm::train {

DataParallel::DataParallel(std::shared_ptr<Communicator> comm, NamedTensors params,
                           DataParallelOptions options)
    : comm_(std::move(comm)), params_(std::move(params)), options_(options) {
  MICROLLM_CHECK(comm_ != nullptr, "data parallel", "no communicator");
  MICROLLM_CHECK(options_.bucket_mb > 0, "data parallel", "bucket size must be positive, found ",
                 options_.bucket_mb, " MiB");
  MICROLLM_CHECK(!params_.empty(), "data parallel", "no parameters");
  std::vector<ParamLayout> layout;
  for (const auto& [name, p] : params_) {
    MICROLLM_CHECK(p.defined() && p.is_leaf() && p.requires_grad(), "data parallel", "parameter ",
                   name, " must be a leaf that requires a gradient");
    MICROLLM_CHECK(p.is_contiguous() && p.device() == comm_->device(), "data parallel",
                   "parameter ", name, " is ", p.describe(), "; expected a contiguous tensor on ",
                   comm_->device());
    layout.push_back({p.numel(), p.dtype()});
  }
  const int world = comm_->world_size();
  const auto cap_bytes = std::max<int64_t>(1, std::llround(options_.bucket_mb * 1024.0 * 1024.0));
  buckets_ = assign_buckets(layout, cap_bytes, world);
  bucket_of_.assign(params_.size(), 0);
  for (size_t b = 0; b < buckets_.size(); ++b) {
    const GradBucket& bucket = buckets_[b];
    for (const BucketEntry& e : bucket.entries) bucket_of_[e.param] = b;
    // Allocated once: the collectives of every step reuse them (and the padding stays zero).
    buffers_.push_back(Tensor::zeros({bucket.padded_numel}, bucket.dtype, comm_->device()));
    if (options_.zero1)
      grad_shards_.push_back(
          Tensor::zeros({bucket.shard_numel(world)}, bucket.dtype, comm_->device()));
  }
  pending_.assign(buckets_.size(), 0);
  if (options_.overlap) {
    for (size_t i = 0; i < params_.size(); ++i)
      hook_ids_.push_back(autograd::register_post_accumulate_grad_hook(
          params_[i].second, [this, i](const Tensor&) { on_grad_ready(i); }));
  }
}

DataParallel::~DataParallel() {
  for (size_t i = 0; i < hook_ids_.size(); ++i)
    autograd::remove_post_accumulate_grad_hook(params_[i].second, hook_ids_[i]);
}

void DataParallel::broadcast_parameters() {
  autograd::NoGradGuard no_grad;
  for (const auto& [name, p] : params_) comm_->broadcast(p.detach(), 0);
}

void DataParallel::prepare_backward(bool sync) {
  MICROLLM_CHECK(works_.empty(), "data parallel",
                 "prepare_backward while a gradient sync is unfinished");
  sync_ = sync;
  if (!sync) return;
  for (size_t b = 0; b < buckets_.size(); ++b)
    pending_[b] = static_cast<int64_t>(buckets_[b].entries.size());
  next_bucket_ = 0;
  started_in_backward_ = 0;
}

void DataParallel::on_grad_ready(size_t param) {
  if (!sync_ || in_finish_) return;
  int64_t& pending = pending_[bucket_of_[param]];
  if (pending > 0 && --pending == 0) start_ready_buckets();
}

void DataParallel::start_ready_buckets() {
  // In bucket order only: every rank must issue the same collectives in the same order.
  while (next_bucket_ < buckets_.size() && pending_[next_bucket_] == 0) {
    start_bucket(next_bucket_++);
    ++started_in_backward_;
  }
}

void DataParallel::start_bucket(size_t b) {
  autograd::NoGradGuard no_grad;
  const Tensor& buffer = buffers_[b];  // (padded_numel)
  for (const BucketEntry& e : buckets_[b].entries) {
    Tensor& p = params_[e.param].second;  // (shape of the parameter)
    // (shape of p): elements [offset, offset + numel) of the bucket buffer
    Tensor slot = buffer.narrow(0, e.offset, e.numel).view(p.shape());
    const Tensor grad = p.grad();  // (shape of p), or undefined
    if (grad.defined())
      slot.copy_from(grad);
    else
      slot.fill(0.0);
    // Plain: the gradient becomes its bucket slot, averaged in place (no copy back).
    // ZeRO-1: only this rank's shard is kept, so the full gradient is dropped now.
    if (options_.zero1)
      p.zero_grad();
    else
      p.set_grad(slot);
  }
  works_.push_back(options_.zero1
                       ? comm_->reduce_scatter_async(buffer, grad_shards_[b], ReduceOp::Avg)
                       : comm_->all_reduce_async(buffer, ReduceOp::Avg));
}

void DataParallel::finish_gradient_sync() {
  MICROLLM_CHECK(sync_, "data parallel",
                 "finish_gradient_sync needs prepare_backward(true) before the backward");
  in_finish_ = true;
  while (next_bucket_ < buckets_.size()) start_bucket(next_bucket_++);
  in_finish_ = false;
  for (const auto& work : works_) work->wait();
  works_.clear();
  sync_ = false;
}

// ---- ZeRO-1 --------------------------------------------------------------------------------

ZeroOptimizer::ZeroOptimizer(DataParallel& dp, const std::string& kind, const AdamWOptions& adamw,
                             const SgdOptions& sgd)
    : Optimizer(std::vector<OptimizerParam>{}), dp_(dp) {
  MICROLLM_CHECK(dp.options().zero1, "zero1", "the DataParallel was made without zero1");
  const Communicator& comm = dp.comm();
  const int world = comm.world_size(), rank = comm.rank();
  std::vector<OptimizerParam> inner_params;
  for (size_t b = 0; b < dp.buckets().size(); ++b) {
    const GradBucket& bucket = dp.buckets()[b];
    for (const ShardSegment& s : shard_segments(bucket, rank, world)) {
      const auto& [pname, p] = dp.params()[s.param];
      // (numel) flat view into the parameter's storage: the inner optimizer publishes into it.
      Tensor slice =
          Tensor::from_storage(p.storage(), {s.numel}, {1}, p.offset() + s.param_offset, p.dtype());
      slice.set_grad(dp.grad_shard(b).narrow(0, s.shard_offset, s.numel));
      const std::string name = pname + "[" + std::to_string(s.param_offset) + ":" +
                               std::to_string(s.param_offset + s.numel) + "]";
      inner_params.emplace_back(name, slice, p.dim() >= 2);
      segments_.push_back({b, s, slice, name});
    }
    send_.push_back(Tensor::zeros({bucket.shard_numel(world)}, bucket.dtype, comm.device()));
    gather_.push_back(Tensor::zeros({bucket.padded_numel}, bucket.dtype, comm.device()));
  }
  inner_ = make_optimizer(kind, inner_params, adamw, sgd);
}

void ZeroOptimizer::step(double lr) {
  update(lr);
  gather_parameters();
}

void ZeroOptimizer::update(double lr) {
  inner_->step(lr);
  steps_ = inner_->steps_taken();
}

void ZeroOptimizer::gather_parameters() {
  autograd::NoGradGuard no_grad;
  for (size_t b = 0; b < dp_.buckets().size(); ++b) {
    Tensor send = send_[b];  // (S)
    for (const Segment& s : segments_)
      if (s.bucket == b)
        send.narrow(0, s.shard.shard_offset, s.shard.numel).copy_from(s.param_slice);
    dp_.comm().all_gather(send, gather_[b]);
    for (const BucketEntry& e : dp_.buckets()[b].entries) {
      Tensor p = dp_.params()[e.param].second.detach();  // (shape of the parameter)
      p.copy_from(gather_[b].narrow(0, e.offset, e.numel).view(p.shape()));
    }
  }
}

double ZeroOptimizer::clip_grad_norm(double max_norm) {
  autograd::NoGradGuard no_grad;
  // Σ g² over this rank's shards, then over ranks; every rank gets the same norm.
  Tensor total = Tensor::zeros({1}, DType::F32, dp_.comm().device());  // (1) F32
  for (const Segment& s : segments_) {
    const Tensor g = s.param_slice.grad().to(DType::F32);  // (numel) F32
    total = ops::add(total, ops::sum_all(ops::mul(g, g)).reshape({1}));
  }
  dp_.comm().all_reduce(total, ReduceOp::Sum);
  const double norm = std::sqrt(total.item());
  if (max_norm > 0.0 && norm > max_norm) {
    const double scale = max_norm / (norm + 1e-6);  // as train::clip_grad_norm
    for (const Segment& s : segments_) {
      Tensor g = s.param_slice.grad();  // (numel), the bucket dtype
      g.copy_from(ops::scale(g, scale));
    }
  }
  return norm;
}

void ZeroOptimizer::load_masters_from_parameters() {
  std::map<std::string, Tensor> state;
  for (const auto& [name, t] : inner_->state()) state[name] = t;
  for (const Segment& s : segments_)
    state["master." + s.name] = s.param_slice.detach().to(DType::F32).clone();
  inner_->load_state(state, inner_->steps_taken());
}

NamedTensors ZeroOptimizer::state() const {
  autograd::NoGradGuard no_grad;
  const Communicator& comm = dp_.comm();
  const int world = comm.world_size();
  std::map<std::string, Tensor> mine;
  for (const auto& [name, t] : inner_->state()) mine[name] = t;
  NamedTensors out;
  for (const std::string& prefix : inner_->state_prefixes()) {
    std::vector<Tensor> full(dp_.params().size());  // per parameter, F32 in its shape
    for (size_t b = 0; b < dp_.buckets().size(); ++b) {
      const GradBucket& bucket = dp_.buckets()[b];
      Tensor send = Tensor::zeros({bucket.shard_numel(world)}, DType::F32, comm.device());  // (S)
      for (const Segment& s : segments_)
        if (s.bucket == b)
          send.narrow(0, s.shard.shard_offset, s.shard.numel)
              .copy_from(mine.at(prefix + "." + s.name));
      Tensor gathered = Tensor::empty({bucket.padded_numel}, DType::F32, comm.device());  // (W·S)
      dp_.comm().all_gather(send, gathered);
      for (const BucketEntry& e : bucket.entries)
        full[e.param] =
            gathered.narrow(0, e.offset, e.numel).view(dp_.params()[e.param].second.shape());
    }
    std::map<std::string, Tensor> by_name;  // the unsharded optimizer's order: by name
    for (size_t i = 0; i < full.size(); ++i)
      by_name[prefix + "." + dp_.params()[i].first] = full[i];
    for (auto& entry : by_name) out.push_back(std::move(entry));
  }
  return out;
}

void ZeroOptimizer::load_state(const std::map<std::string, Tensor>& tensors, int64_t steps) {
  autograd::NoGradGuard no_grad;
  auto full = [&](const std::string& key, const Tensor& like) {
    auto it = tensors.find(key);
    MICROLLM_CHECK(it != tensors.end(), "optimizer", "checkpoint has no ", key);
    MICROLLM_CHECK(it->second.shape() == like.shape(), "optimizer", key, " is ",
                   it->second.describe(), ", expected the shape of ", like.describe());
    return it->second;
  };
  // Every parameter from its master (as the unsharded load publishes), so ranks agree.
  for (const auto& [name, p] : dp_.params()) p.detach().copy_from(full("master." + name, p));
  std::map<std::string, Tensor> mine;
  for (const std::string& prefix : inner_->state_prefixes()) {
    for (const Segment& s : segments_) {
      const auto& [pname, p] = dp_.params()[s.shard.param];
      // (s.shard.numel) F32: this rank's elements of the full tensor
      mine[prefix + "." + s.name] = full(prefix + "." + pname, p)
                                        .contiguous()
                                        .reshape({-1})
                                        .narrow(0, s.shard.param_offset, s.shard.numel);
    }
  }
  inner_->load_state(mine, steps);
  steps_ = steps;
}

}  // namespace microllm::train
