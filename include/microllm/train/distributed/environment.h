// The process's place in a data-parallel run, from torchrun-compatible environment
// variables (set by `microllm launch`, torchrun, or by hand):
//   RANK, WORLD_SIZE               this process among all of them
//   LOCAL_RANK, LOCAL_WORLD_SIZE   among those on this host; LOCAL_RANK picks cuda:LOCAL_RANK
//   MASTER_ADDR, MASTER_PORT       where rank 0 listens for the rendezvous (tcp_rendezvous.h)
#pragma once

#include <functional>
#include <string>

namespace microllm::train {

struct DistributedEnv {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  std::string master_addr = "127.0.0.1";  // torchrun's defaults
  int master_port = 29500;
  bool is_set = false;  // WORLD_SIZE was present
};

using GetEnv = std::function<const char*(const char* name)>;

// Reads the variables through `getenv` (the process environment by default). Without
// WORLD_SIZE: one process. With WORLD_SIZE > 1, RANK is required; LOCAL_RANK defaults to
// RANK, LOCAL_WORLD_SIZE to WORLD_SIZE, MASTER_ADDR/PORT to 127.0.0.1:29500. A malformed or
// inconsistent value is an Error naming the variable.
DistributedEnv read_distributed_env(const GetEnv& getenv = nullptr);

}  // namespace microllm::train
