// Bootstrap of a multi-process run over TCP: rank 0 listens on MASTER_PORT and hands a
// small blob — NCCL's 128-byte unique id — to every other rank, which connects to
// MASTER_ADDR:MASTER_PORT. The same exchange works on one host and across hosts; it needs
// no shared file system and no MPI.
//
// Protocol, integers big-endian:
//   rank r → rank 0   "MLLMRDV1" | u32 rank | u32 world size
//   rank 0 → rank r   "MLLMRDV1" | u32 status | u32 length | length bytes
//                     status 0: the bytes are the blob; otherwise an error text
// Rank 0 listens on every interface (IPv6 dual stack, else IPv4). Other ranks retry while
// rank 0 is not listening yet, until their timeout. Connections that do not speak the
// protocol are dropped and ignored; a rank with another world size, or a rank number outside
// the world, is refused and ends the rendezvous with an Error on both sides. Timeouts name
// what was missing (rank 0: the ranks that never connected; others: the address and the
// last connection error).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "microllm/train/distributed/environment.h"

namespace microllm::train {

class RendezvousServer {
 public:
  // Listens at `port` on every interface (0: a free port; see port()).
  RendezvousServer(int port, int world_size);
  ~RendezvousServer();
  RendezvousServer(const RendezvousServer&) = delete;
  RendezvousServer& operator=(const RendezvousServer&) = delete;

  int port() const { return port_; }
  // Sends `blob` to each of ranks 1..W−1 as they connect; returns once all have it.
  void serve(const std::vector<uint8_t>& blob, double timeout_seconds);

 private:
  int fd_ = -1;
  int port_ = 0;
  int world_size_;
};

// Connects to rank 0 at host:port as `rank` of `world_size` and returns its blob.
std::vector<uint8_t> fetch_rendezvous_blob(const std::string& host, int port, int rank,
                                           int world_size, double timeout_seconds);

// Rank 0 serves `blob` (its own value is returned), the other ranks fetch it: after this
// call every rank holds rank 0's blob. World size 1 returns `blob` without networking.
std::vector<uint8_t> exchange_rendezvous_blob(const DistributedEnv& env,
                                              const std::vector<uint8_t>& blob,
                                              double timeout_seconds);

}  // namespace microllm::train
