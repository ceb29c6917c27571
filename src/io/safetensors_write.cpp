// safetensors writing: single files and sharded checkpoints with their index, each file
// written to a temporary file, fsync'ed and renamed (never a partial file under the name).
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <set>

#include <nlohmann/json.hpp>

#include "microllm/io/safetensors.h"
#include "safetensors_internal.h"

namespace microllm::io {

namespace fs = std::filesystem;

// ---- AtomicFile --------------------------------------------------------------------------

AtomicFile::AtomicFile(std::string path) : path_(std::move(path)) {
  static std::atomic<uint64_t> counter{0};
  for (int attempt = 0;; ++attempt) {
    temp_path_ = path_ + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++);
    fd_ = ::open(temp_path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd_ >= 0) return;
    if (errno != EEXIST || attempt >= 100)
      safetensors_fail(
          path_, "cannot create the temporary file " + temp_path_ + ": " + std::strerror(errno));
  }
}

AtomicFile::~AtomicFile() {
  if (!committed_) abandon();
}

void AtomicFile::abandon() noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  ::unlink(temp_path_.c_str());
}

void AtomicFile::write(const void* data, size_t nbytes) {
  const auto* p = static_cast<const char*>(data);
  while (nbytes > 0) {
    const ssize_t n = ::write(fd_, p, std::min<size_t>(nbytes, size_t{1} << 30));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      safetensors_fail(path_, "write to " + temp_path_ +
                                  " failed: " + (n < 0 ? std::strerror(errno) : "no progress") +
                                  " (the previous file, if any, is untouched)");
    p += n;
    nbytes -= static_cast<size_t>(n);
  }
}

void AtomicFile::commit() {
  if (::fsync(fd_) != 0)
    safetensors_fail(path_, "fsync of " + temp_path_ + " failed: " + std::strerror(errno));
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0)
    safetensors_fail(path_, "close of " + temp_path_ + " failed: " + std::strerror(errno));
  if (std::rename(temp_path_.c_str(), path_.c_str()) != 0)
    safetensors_fail(path_, "rename from " + temp_path_ + " failed: " + std::strerror(errno));
  committed_ = true;
  // Make the rename itself durable.
  const fs::path parent = fs::path(path_).parent_path();
  const int dir = ::open(parent.empty() ? "." : parent.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir >= 0) {
    ::fsync(dir);
    ::close(dir);
  }
}

namespace {

// The dense little-endian bytes of `t` in its own dtype, on the CPU.
Tensor dense_cpu(const Tensor& t) {
  Tensor dense = t.detach();
  if (!dense.is_cpu()) dense = dense.to(Device::cpu());
  return dense.contiguous();
}

// Names must be non-empty, unique and not the reserved "__metadata__"; tensors defined.
void check_tensors(const std::string& path, const NamedTensors& tensors) {
  std::set<std::string> seen;
  for (const auto& [name, t] : tensors) {
    if (name.empty()) safetensors_fail(path, "cannot save a tensor with an empty name");
    if (name == "__metadata__")
      safetensors_fail(path, "\"__metadata__\" is reserved, not a tensor name");
    if (!seen.insert(name).second)
      safetensors_fail(path, "tensor name '" + name + "' is given twice");
    if (!t.defined()) safetensors_fail(path, "tensor '" + name + "' is undefined");
  }
}

std::string dump_json(const nlohmann::ordered_json& value, const std::string& path, int indent) {
  try {
    return value.dump(indent);
  } catch (const nlohmann::json::exception&) {
    safetensors_fail(path, "a tensor name or metadata string is not valid UTF-8");
  }
}

}  // namespace

void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata) {
  check_tensors(path, tensors);

  // Data in order of descending element size (stable), so that with the 8-byte aligned
  // header every tensor starts at a multiple of its element size: readers can use the
  // mapped bytes in place.
  std::vector<size_t> order(tensors.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return dtype_size(tensors[a].second.dtype()) > dtype_size(tensors[b].second.dtype());
  });
  std::vector<std::pair<uint64_t, uint64_t>> offsets(tensors.size());
  uint64_t cursor = 0;
  for (size_t i : order) {
    offsets[i] = {cursor, cursor + tensors[i].second.nbytes()};
    cursor += tensors[i].second.nbytes();
  }

  // Header entries in the caller's order, "__metadata__" first.
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  nlohmann::ordered_json meta = nlohmann::ordered_json::object();
  if (!metadata.count("format")) meta["format"] = "pt";
  for (const auto& [key, value] : metadata) meta[key] = value;
  header["__metadata__"] = meta;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i].second;
    header[tensors[i].first] = {{"dtype", std::string(safetensors_dtype_name(t.dtype()))},
                                {"shape", t.shape()},
                                {"data_offsets", {offsets[i].first, offsets[i].second}}};
  }
  std::string text = dump_json(header, path, -1);
  text.append((8 - text.size() % 8) % 8, ' ');  // spaces, as Hugging Face pads
  unsigned char length[8];
  for (int b = 0; b < 8; ++b) length[b] = static_cast<unsigned char>(text.size() >> (8 * b));

  AtomicFile file(path);
  file.write(length, sizeof(length));
  file.write(text.data(), text.size());
  for (size_t i : order) {
    const Tensor dense = dense_cpu(tensors[i].second);  // one tensor in host memory at a time
    if (dense.nbytes()) file.write(dense.raw_data(), dense.nbytes());
  }
  file.commit();
}

std::vector<std::string> save_safetensors_sharded(
    const std::string& dir, const NamedTensors& tensors, uint64_t max_shard_bytes,
    const std::map<std::string, std::string>& metadata, const std::string& prefix) {
  const fs::path folder(dir);
  const std::string index_path = (folder / (prefix + ".safetensors.index.json")).string();
  if (max_shard_bytes == 0) safetensors_fail(index_path, "max_shard_bytes must be positive");
  if (prefix.empty() || fs::path(prefix).has_parent_path())
    safetensors_fail(index_path, "the prefix '" + prefix + "' must be a plain file name");
  check_tensors(index_path, tensors);
  std::error_code ec;
  fs::create_directories(folder, ec);
  if (ec) safetensors_fail(dir, "cannot create the directory: " + ec.message());

  // Greedy packing in the given order; a tensor larger than the limit gets its own shard.
  std::vector<NamedTensors> shards(1);
  uint64_t shard_bytes = 0, total_bytes = 0;
  for (const auto& entry : tensors) {
    const uint64_t n = entry.second.nbytes();
    if (!shards.back().empty() && shard_bytes + n > max_shard_bytes) {
      shards.emplace_back();
      shard_bytes = 0;
    }
    shards.back().push_back(entry);
    shard_bytes += n;
    total_bytes += n;
  }

  std::vector<std::string> names;
  std::map<std::string, std::string> weight_map;  // sorted keys, as transformers writes them
  for (size_t k = 0; k < shards.size(); ++k) {
    char name[64];
    std::snprintf(name, sizeof(name), "-%05zu-of-%05zu.safetensors", k + 1, shards.size());
    names.push_back(prefix + name);
    save_safetensors((folder / names.back()).string(), shards[k], metadata);
    for (const auto& entry : shards[k]) weight_map[entry.first] = names.back();
  }
  const nlohmann::ordered_json index = {{"metadata", {{"total_size", total_bytes}}},
                                        {"weight_map", weight_map}};
  const std::string text = dump_json(index, index_path, 2) + "\n";
  AtomicFile file(index_path);
  file.write(text.data(), text.size());
  file.commit();

  // A single-file checkpoint left from an earlier save would make the folder ambiguous.
  const fs::path stale = folder / (prefix + ".safetensors");
  if (fs::is_regular_file(stale, ec)) fs::remove(stale, ec);
  return names;
}

}  // namespace microllm::io
