// The one exception type of microllm and the check macros that throw it.
//
// An Error names the operator (or component) that failed and says what was expected and
// what was found; callers add the shapes, dtypes and devices involved to the message.
// The library never calls exit(): the CLI and server turn Errors into exit codes and 4xx.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace microllm {

class Error : public std::runtime_error {
 public:
  Error(std::string op, const std::string& message)
      : std::runtime_error(op.empty() ? message : op + ": " + message), op_(std::move(op)) {}
  // The operator or component that raised the error ("matmul", "safetensors", ...).
  const std::string& op() const { return op_; }

 private:
  std::string op_;
};

namespace detail {
// Streams every argument into one string: error_message("got ", shape, " and ", dtype).
template <class... Args>
std::string error_message(const Args&... args) {
  std::ostringstream out;
  (out << ... << args);
  return out.str();
}
}  // namespace detail

}  // namespace microllm

// MICROLLM_CHECK(cond, op, parts...) throws microllm::Error(op, parts...) when cond is false.
#define MICROLLM_CHECK(cond, op, ...)                                                           \
  do {                                                                                          \
    if (!(cond)) throw ::microllm::Error((op), ::microllm::detail::error_message(__VA_ARGS__)); \
  } while (0)

// MICROLLM_FAIL(op, parts...) throws unconditionally.
#define MICROLLM_FAIL(op, ...) \
  throw ::microllm::Error((op), ::microllm::detail::error_message(__VA_ARGS__))
