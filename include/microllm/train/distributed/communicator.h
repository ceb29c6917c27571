// The collectives data-parallel training needs, behind one small interface: all-reduce,
// reduce-scatter, all-gather, broadcast and barrier over the ranks of one group.
//
// Every rank calls the same collectives in the same order with tensors of the same shape
// and dtype (as with NCCL and torch.distributed). Tensors are contiguous and live on the
// communicator's device; operations work in place on the tensor handles passed in.
// Implementations:
//   InProcessCommunicator  ranks are threads of one process (tests; any device, CPU mostly)
//   NcclCommunicator       one process per GPU, over NCCL (built with MICROLLM_WITH_NCCL)
//
// Ordering (NCCL): the plain calls are enqueued on the calling thread's current stream of
// the device — the training stream — and return without waiting for the device. The
// *_async calls run on the communicator's own stream, after the work enqueued so far on the
// training stream, so backward can keep computing while a bucket is reduced; Work::wait()
// makes the training stream wait for them (the host does not block).
//
// Shapes: reduce_scatter  input (W·n) → output (n), rank r receives elements [r·n, (r+1)·n)
//         all_gather      input (n)   → output (W·n), rank r's input lands at [r·n, (r+1)·n)
#pragma once

#include <memory>
#include <string>

#include "microllm/core/tensor.h"

namespace microllm::train {

enum class ReduceOp { Sum, Avg };
const char* reduce_op_name(ReduceOp op);

// A collective started by a *_async call.
class Work {
 public:
  virtual ~Work() = default;
  // Orders the training stream after the collective (NCCL) or returns at once when it has
  // already completed (in-process). Call once, from the thread that started it.
  virtual void wait() = 0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  // The device collective buffers live on.
  virtual Device device() const = 0;
  // "in-process" or "nccl", for logs.
  virtual std::string backend_name() const = 0;

  // t ← Σ over ranks (Avg: divided by the world size), on every rank.
  virtual void all_reduce(Tensor t, ReduceOp op) = 0;
  virtual void reduce_scatter(const Tensor& input, Tensor output, ReduceOp op) = 0;
  virtual void all_gather(const Tensor& input, Tensor output) = 0;
  // t ← rank `root`'s t, on every rank.
  virtual void broadcast(Tensor t, int root) = 0;
  // Returns once every rank has called it; the host waits (NCCL: for the device too).
  virtual void barrier() = 0;

  virtual std::unique_ptr<Work> all_reduce_async(Tensor t, ReduceOp op) = 0;
  virtual std::unique_ptr<Work> reduce_scatter_async(const Tensor& input, Tensor output,
                                                     ReduceOp op) = 0;
};

// How a collective's output relates to its input (W = world size).
enum class CollectiveShape {
  InPlace,  // one tensor (all_reduce, broadcast)
  Scatter,  // input W·n elements, output n (reduce_scatter)
  Gather,   // input n elements, output W·n (all_gather)
};

// Checks a collective's tensors before anything runs: defined, contiguous, on `comm`'s
// device, equal dtypes and the sizes `shape` asks for. Throws an Error naming `op`, the
// tensors and the rank.
void check_collective(const Communicator& comm, const char* op, CollectiveShape shape,
                      const Tensor& input, const Tensor& output = Tensor());

}  // namespace microllm::train
