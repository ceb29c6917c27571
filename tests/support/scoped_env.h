// Sets (or, given null, unsets) an environment variable for the lifetime of the object, then
// restores what the environment had (unset, or the old value): for tests of the MICROLLM_*
// switches, which are read at each call.
#pragma once

#include <cstdlib>
#include <optional>
#include <string>

namespace microllm::testing {

class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) previous_ = old;
    if (value)
      setenv(name, value, 1);
    else
      unsetenv(name);  // a null value: the switch unset, its default
  }
  ~ScopedEnv() {
    if (previous_)
      setenv(name_.c_str(), previous_->c_str(), 1);
    else
      unsetenv(name_.c_str());
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_;
  std::optional<std::string> previous_;
};

}  // namespace microllm::testing
