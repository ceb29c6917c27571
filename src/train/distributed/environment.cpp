// torchrun-compatible environment variables (see environment.h).
#include "microllm/train/distributed/environment.h"

#include <cerrno>
#include <climits>
#include <cstdlib>

#include "microllm/core/error.h"

namespace microllm::train {
namespace {

// The integer value of `name`, or `fallback` when unset; an Error unless it lies in [lo, hi].
int int_var(const GetEnv& getenv, const char* name, int fallback, long lo, long hi) {
  const char* text = getenv(name);
  if (text == nullptr) return fallback;
  char* end = nullptr;
  errno = 0;
  const long value = std::strtol(text, &end, 10);
  MICROLLM_CHECK(*text != '\0' && end && *end == '\0' && errno == 0, "distributed", name, "='",
                 text, "' is not an integer");
  MICROLLM_CHECK(value >= lo && value <= hi, "distributed", name, "=", value, " is outside [", lo,
                 ", ", hi, "]");
  return static_cast<int>(value);
}

}  // namespace

DistributedEnv read_distributed_env(const GetEnv& getenv_in) {
  const GetEnv getenv =
      getenv_in ? getenv_in : [](const char* name) -> const char* { return std::getenv(name); };
  DistributedEnv env;
  env.is_set = getenv("WORLD_SIZE") != nullptr;
  env.world_size = int_var(getenv, "WORLD_SIZE", 1, 1, INT_MAX);
  MICROLLM_CHECK(env.world_size == 1 || getenv("RANK") != nullptr, "distributed",
                 "WORLD_SIZE=", env.world_size,
                 " but RANK is not set (start the ranks with `microllm launch`)");
  env.rank = int_var(getenv, "RANK", 0, 0, env.world_size - 1);
  env.local_world_size = int_var(getenv, "LOCAL_WORLD_SIZE", env.world_size, 1, env.world_size);
  env.local_rank = int_var(getenv, "LOCAL_RANK", env.rank, 0, env.local_world_size - 1);
  if (const char* addr = getenv("MASTER_ADDR")) {
    MICROLLM_CHECK(*addr != '\0', "distributed", "MASTER_ADDR is empty");
    env.master_addr = addr;
  }
  env.master_port = int_var(getenv, "MASTER_PORT", env.master_port, 1, 65535);
  return env;
}

}  // namespace microllm::train
