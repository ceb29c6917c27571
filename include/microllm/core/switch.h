// The MICROLLM_* environment switches that choose a kernel or a graph form (the list
// the benchmarks record is bench/kernel_switches.h).
#pragma once

#include <charconv>
#include <cstdlib>
#include <cstring>
#include <system_error>

#include "microllm/core/error.h"

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

// The whole number ≥ 0 in the environment variable `name`, or `fallback` when it is unset: the
// form of a switch that sets a size. Any other value is an error that names the variable.
// Read at each call.
inline int switch_count(const char* name, int fallback) {
  const char* value = std::getenv(name);
  if (value == nullptr) return fallback;
  const char* end = value + std::strlen(value);
  int count = 0;
  const auto [stop, status] = std::from_chars(value, end, count);
  MICROLLM_CHECK(status == std::errc() && stop == end && count >= 0, "switch",
                 "expected a whole number >= 0 in ", name, ", found '", value, "'");
  return count;
}

}  // namespace microllm
