// The NCCL communicator: one process (or thread) per GPU, collectives over NVLink / network
// through NCCL. Built only with MICROLLM_WITH_NCCL=ON (this header declares it either way;
// callers guard their use with `#if MICROLLM_WITH_NCCL`).
//
// Streams (see communicator.h): the plain collectives run on the current stream of the
// communicator's device (the training stream); the *_async ones on a stream of the
// communicator's own, after an event recorded on the training stream, and their Work makes
// the training stream wait for an event recorded after the collective. Buffers passed to an
// async collective must stay alive until its Work is waited on (DataParallel's buckets live
// as long as the trainer).
//
// Bootstrap: rank 0 calls nccl_unique_id(); every rank gets those 128 bytes (the TCP
// rendezvous, tcp_rendezvous.h) and constructs its communicator, which blocks in
// ncclCommInitRank until all ranks have joined.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>

#include "microllm/train/distributed/communicator.h"

namespace microllm::train {

using NcclUniqueId = std::array<uint8_t, 128>;  // NCCL_UNIQUE_ID_BYTES

// A new unique id (rank 0 only, before the ranks join).
NcclUniqueId nccl_unique_id();
// "2.28.9": the NCCL library's version.
std::string nccl_version();

class NcclCommunicator final : public Communicator {
 public:
  // Joins the group `id` as `rank` of `world_size` on CUDA device `device`.
  NcclCommunicator(const NcclUniqueId& id, int rank, int world_size, Device device);
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }
  Device device() const override { return device_; }
  std::string backend_name() const override { return "nccl"; }

  void all_reduce(Tensor t, ReduceOp op) override;
  void reduce_scatter(const Tensor& input, Tensor output, ReduceOp op) override;
  void all_gather(const Tensor& input, Tensor output) override;
  void broadcast(Tensor t, int root) override;
  void barrier() override;
  std::unique_ptr<Work> all_reduce_async(Tensor t, ReduceOp op) override;
  std::unique_ptr<Work> reduce_scatter_async(const Tensor& input, Tensor output,
                                             ReduceOp op) override;

 private:
  struct State;  // ncclComm_t and the communication stream (keeps nccl.h out of this header)
  std::unique_ptr<State> state_;
  int rank_;
  int world_size_;
  Device device_;
};

}  // namespace microllm::train
