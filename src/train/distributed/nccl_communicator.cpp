// Collectives over NCCL (see nccl_communicator.h). Compiled only with MICROLLM_WITH_NCCL.
// Reference: NCCL user guide, "Collective operations", "Creating a communicator",
// "CUDA stream semantics".
#include "microllm/train/distributed/nccl_communicator.h"

#include <cuda_bf16.h>
#include <nccl.h>

#include <cstring>
#include <string>

#include "microllm/cuda/check.h"
#include "microllm/cuda/runtime.h"
#include "microllm/train/distributed/nccl_check.h"

namespace microllm::train {

namespace detail {
void throw_nccl_error(ncclResult_t status, const char* call, const char* file, int line) {
  const char* last = ncclGetLastError(nullptr);
  throw Error("nccl", std::string(call) + " failed: " + ncclGetErrorString(status) +
                          (last && *last ? std::string(" (") + last + ")" : std::string()) +
                          " at " + file + ":" + std::to_string(line));
}
}  // namespace detail

namespace {

static_assert(sizeof(ncclUniqueId) == std::tuple_size_v<NcclUniqueId>, "NCCL unique id size");

ncclDataType_t nccl_type(DType dtype, const char* op) {
  switch (dtype) {
    case DType::F32:
      return ncclFloat32;
    case DType::F64:
      return ncclFloat64;
    case DType::F16:
      return ncclFloat16;
    case DType::BF16:
      return ncclBfloat16;
    case DType::I32:
      return ncclInt32;
    case DType::I64:
      return ncclInt64;
    case DType::I8:
      return ncclInt8;
    case DType::U8:
      return ncclUint8;
    default:
      MICROLLM_FAIL(op, "NCCL has no type for ", dtype);
  }
}

ncclRedOp_t nccl_op(ReduceOp op) { return op == ReduceOp::Sum ? ncclSum : ncclAvg; }

// A collective on the communication stream: the training stream waits on `done`.
class NcclWork final : public Work {
 public:
  NcclWork(std::unique_ptr<cuda::Event> done, Device device)
      : done_(std::move(done)), device_(device) {}
  void wait() override { done_->wait(cuda::current_stream(device_)); }

 private:
  std::unique_ptr<cuda::Event> done_;
  Device device_;
};

// Work done on the training stream itself (one rank): already ordered, nothing to wait for.
class LocalWork final : public Work {
 public:
  void wait() override {}
};

}  // namespace

struct NcclCommunicator::State {
  ncclComm_t comm = nullptr;
  cuda::Stream side;  // the communication stream, for the *_async collectives
};

NcclUniqueId nccl_unique_id() {
  ncclUniqueId id;
  NCCL_CHECK(ncclGetUniqueId(&id));
  NcclUniqueId out;
  std::memcpy(out.data(), &id, out.size());
  return out;
}

std::string nccl_version() {
  int code = 0;
  NCCL_CHECK(ncclGetVersion(&code));
  // NCCL ≥ 2.9 encodes major·10000 + minor·100 + patch.
  return std::to_string(code / 10000) + "." + std::to_string(code / 100 % 100) + "." +
         std::to_string(code % 100);
}

NcclCommunicator::NcclCommunicator(const NcclUniqueId& id, int rank, int world_size, Device device)
    : state_(std::make_unique<State>()), rank_(rank), world_size_(world_size), device_(device) {
  MICROLLM_CHECK(device.is_cuda(), "nccl", "the NCCL communicator needs a CUDA device, found ",
                 device);
  MICROLLM_CHECK(world_size >= 1 && rank >= 0 && rank < world_size, "nccl", "rank ", rank,
                 " is outside a world of ", world_size);
  cuda::set_device(device);  // ncclCommInitRank binds the communicator to the current device
  ncclUniqueId nccl_id;
  std::memcpy(&nccl_id, id.data(), id.size());
  NCCL_CHECK(ncclCommInitRank(&state_->comm, world_size, nccl_id, rank));
  state_->side = cuda::Stream::create(device);
}

NcclCommunicator::~NcclCommunicator() {
  if (state_ && state_->comm) ncclCommDestroy(state_->comm);  // no throw from a destructor
}

// One rank: every collective is the identity (a copy when out of place), done on the training
// stream without NCCL. Besides saving the launches, this avoids what NCCL 2.28 did on the
// H200 machine: an out-of-place ncclReduceScatter (ncclAvg, F32) at one rank left the last 16
// of 66,112 elements unwritten, while 4,096, 4,112, 1,000,003 and 2^20 elements came out
// exact (docs/distributed.md).
void NcclCommunicator::all_reduce(Tensor t, ReduceOp op) {
  check_collective(*this, "all_reduce", CollectiveShape::InPlace, t);
  if (world_size_ == 1) return;
  NCCL_CHECK(ncclAllReduce(t.raw_data(), t.raw_data(), static_cast<size_t>(t.numel()),
                           nccl_type(t.dtype(), "all_reduce"), nccl_op(op), state_->comm,
                           cuda::current_stream_handle(device_)));
}

void NcclCommunicator::reduce_scatter(const Tensor& input, Tensor output, ReduceOp op) {
  check_collective(*this, "reduce_scatter", CollectiveShape::Scatter, input, output);
  if (world_size_ == 1) {
    if (!output.same(input)) output.copy_from(input);
    return;
  }
  NCCL_CHECK(ncclReduceScatter(input.raw_data(), output.raw_data(),
                               static_cast<size_t>(output.numel()),
                               nccl_type(input.dtype(), "reduce_scatter"), nccl_op(op),
                               state_->comm, cuda::current_stream_handle(device_)));
}

void NcclCommunicator::all_gather(const Tensor& input, Tensor output) {
  check_collective(*this, "all_gather", CollectiveShape::Gather, input, output);
  if (world_size_ == 1) {
    if (!output.same(input)) output.copy_from(input);
    return;
  }
  NCCL_CHECK(ncclAllGather(input.raw_data(), output.raw_data(), static_cast<size_t>(input.numel()),
                           nccl_type(input.dtype(), "all_gather"), state_->comm,
                           cuda::current_stream_handle(device_)));
}

void NcclCommunicator::broadcast(Tensor t, int root) {
  check_collective(*this, "broadcast", CollectiveShape::InPlace, t);
  MICROLLM_CHECK(root >= 0 && root < world_size_, "broadcast", "root ", root,
                 " is outside a world of ", world_size_);
  if (world_size_ == 1) return;
  NCCL_CHECK(ncclBroadcast(t.raw_data(), t.raw_data(), static_cast<size_t>(t.numel()),
                           nccl_type(t.dtype(), "broadcast"), root, state_->comm,
                           cuda::current_stream_handle(device_)));
}

void NcclCommunicator::barrier() {
  // NCCL has no barrier: a one-element all-reduce every rank must join, then the host waits.
  Tensor token = Tensor::zeros({1}, DType::F32, device_);  // (1)
  all_reduce(token, ReduceOp::Sum);
  cuda::synchronize(cuda::current_stream(device_));
}

std::unique_ptr<Work> NcclCommunicator::all_reduce_async(Tensor t, ReduceOp op) {
  check_collective(*this, "all_reduce", CollectiveShape::InPlace, t);
  if (world_size_ == 1) return std::make_unique<LocalWork>();
  // The communication stream starts after what the training stream has enqueued so far
  // (the copies into the bucket), and the training stream later waits for it.
  const cuda::Stream train = cuda::current_stream(device_);
  cuda::Event ready;
  ready.record(train);
  ready.wait(state_->side);
  NCCL_CHECK(ncclAllReduce(t.raw_data(), t.raw_data(), static_cast<size_t>(t.numel()),
                           nccl_type(t.dtype(), "all_reduce"), nccl_op(op), state_->comm,
                           state_->side.handle()));
  auto done = std::make_unique<cuda::Event>();
  done->record(state_->side);
  return std::make_unique<NcclWork>(std::move(done), device_);
}

std::unique_ptr<Work> NcclCommunicator::reduce_scatter_async(const Tensor& input, Tensor output,
                                                             ReduceOp op) {
  check_collective(*this, "reduce_scatter", CollectiveShape::Scatter, input, output);
  if (world_size_ == 1) {
    reduce_scatter(input, output, op);
    return std::make_unique<LocalWork>();
  }
  const cuda::Stream train = cuda::current_stream(device_);
  cuda::Event ready;
  ready.record(train);
  ready.wait(state_->side);
  NCCL_CHECK(ncclReduceScatter(input.raw_data(), output.raw_data(),
                               static_cast<size_t>(output.numel()),
                               nccl_type(input.dtype(), "reduce_scatter"), nccl_op(op),
                               state_->comm, state_->side.handle()));
  auto done = std::make_unique<cuda::Event>();
  done->record(state_->side);
  return std::make_unique<NcclWork>(std::move(done), device_);
}

}  // namespace microllm::train
