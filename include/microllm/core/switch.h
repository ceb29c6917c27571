// The MICROLLM_* environment switches that choose a kernel or a graph form (the list
// the benchmarks record is bench/kernel_switches.h).
#pragma once

#include <cstdlib>
#include <cstring>

namespace microllm {

// Whether the environment variable `name` is exactly "1". Read at each call, so that tests
// can switch it between calls.
inline bool switch_on(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr && std::strcmp(value, "1") == 0;
}

// Whether the environment variable `name` is exactly "0": the form of a switch whose fast
// path is the default and whose reference path is one setting away. Read at each call.
inline bool switch_off(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr && std::strcmp(value, "0") == 0;
}

}  // namespace microllm
