// Pieces shared by the safetensors reader, writer and loader (src/io/safetensors*.cpp).
#pragma once

#include <cstddef>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace microllm::io {

// Throws Error("safetensors", "SOURCE: WHAT").
[[noreturn]] void safetensors_fail(const std::string& source, const std::string& what);

// JSON parsed with every repeated key found (nlohmann's DOM silently keeps the last one).
struct StrictJson {
  struct Duplicate {
    std::string key;
    size_t depth;       // 1: a key of the top-level object
    std::string owner;  // the top-level key whose value holds the repeat (depth > 1)
  };
  nlohmann::json value;
  std::optional<Duplicate> duplicate;  // the first repeated key, if any
};
// Fails with "SOURCE: the WHAT is not valid JSON (...)" on a syntax error.
StrictJson parse_json_strict(const char* begin, const char* end, const std::string& source,
                             const std::string& what);

// A file written in full or not at all: bytes go to a temporary file beside `path`
// (PATH.tmp.PID.N, created exclusively); commit() fsyncs it, renames it over `path` and
// fsyncs the directory. Destroyed without commit(), the temporary file is removed and
// `path` is untouched.
class AtomicFile {
 public:
  explicit AtomicFile(std::string path);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, size_t nbytes);
  void commit();
  const std::string& temp_path() const { return temp_path_; }

 private:
  void abandon() noexcept;
  std::string path_, temp_path_;
  int fd_ = -1;
  bool committed_ = false;
};

}  // namespace microllm::io
