// Argument checks shared by the communicators (see communicator.h).
#include "microllm/train/distributed/communicator.h"

namespace microllm::train {

const char* reduce_op_name(ReduceOp op) { return op == ReduceOp::Sum ? "sum" : "avg"; }

void check_collective(const Communicator& comm, const char* op, CollectiveShape shape,
                      const Tensor& input, const Tensor& output) {
  const int rank = comm.rank();
  const int64_t world = comm.world_size();
  auto check_one = [&](const Tensor& t, const char* role) {
    MICROLLM_CHECK(t.defined(), op, "rank ", rank, ": undefined ", role, " tensor");
    MICROLLM_CHECK(t.is_contiguous(), op, "rank ", rank, ": the ", role, " tensor ", t.describe(),
                   " is not contiguous");
    MICROLLM_CHECK(t.device() == comm.device(), op, "rank ", rank, ": the ", role, " tensor ",
                   t.describe(), " is not on the communicator's device ", comm.device());
  };
  check_one(input, "input");
  if (shape == CollectiveShape::InPlace) return;
  check_one(output, "output");
  MICROLLM_CHECK(input.dtype() == output.dtype(), op, "rank ", rank, ": input ", input.describe(),
                 " and output ", output.describe(), " differ in dtype");
  const bool scatter = shape == CollectiveShape::Scatter;
  const int64_t big = scatter ? input.numel() : output.numel();
  const int64_t small = scatter ? output.numel() : input.numel();
  MICROLLM_CHECK(big == world * small, op, "rank ", rank, ": the ", scatter ? "input" : "output",
                 " must hold ", world, " (world size) × the ", scatter ? "output" : "input", "'s ",
                 small, " elements, found ", input.describe(), " → ", output.describe());
}

}  // namespace microllm::train
